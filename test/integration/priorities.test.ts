import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, useStack } from "./stack.js";

/*
 * Priorities in the Worker (docs/algorithms.md, Priorities): a flash sale's one bucket per tenant, 20 an hour,
 * a quarter kept for critical calls (checkout) and another quarter for default ones, the priority
 * in a header the edge sets. Sheddable traffic (browsing) may take 10, default 15, critical all 20.
 */
const SLUICE: SluiceInput = {
  key_prefix: "prio",
  timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
  routes: [
    {
      name: "shop",
      match: "/shop/*",
      priority: "header:x-priority",
      limits: [
        {
          name: "tenant",
          key: "header:x-tenant",
          rate: 20,
          period: "1h",
          burst: 20,
          reserve: { critical: 0.25, default: 0.25 },
        },
      ],
    },
  ],
};

const rig = useStack({ sluice: SLUICE });
let mf: Miniflare;
beforeAll(() => {
  ({ mf } = rig);
});

const shop = (tenant: string, priority: string) =>
  call(mf, "/shop/item", { headers: { "x-tenant": tenant, "x-priority": priority } });

describe("priorities (workerd)", () => {
  it("under overload from sheddable and default traffic, critical calls still get their reserve", async () => {
    const flood = Array.from({ length: 60 }, (_, i) => shop("t1", i % 2 === 0 ? "sheddable" : "default"));
    const flooded = await Promise.all(flood);
    const passed = flooded.filter((r) => r.status === 200).length;
    // nobody below critical gets past the critical reserve: 15 of the 20 at most
    expect(passed).toBe(15);
    for (const r of flooded.filter((x) => x.status === 429)) {
      expect(r.headers.get("Retry-After")).not.toBeNull();
      expect(r.headers.get("RateLimit")).toMatch(/^"tenant";r=0;t=\d+$/);
    }
    const critical = await Promise.all(Array.from({ length: 8 }, () => shop("t1", "critical")));
    expect(critical.filter((r) => r.status === 200).length).toBe(5);
  });

  it("sheddable is refused first: below the default reserve, default passes and sheddable does not", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 11; i++) statuses.push((await shop("t2", "sheddable")).status);
    expect(statuses).toEqual([...Array<number>(10).fill(200), 429]);
    const refused = await shop("t2", "sheddable");
    expect(refused.status).toBe(429);
    // one token back every 3 minutes: 10 + 1 left in 180 s
    expect(refused.headers.get("Retry-After")).toBe("180");
    const byDefault = await shop("t2", "default");
    expect(byDefault.status).toBe(200);
    expect(byDefault.headers.get("RateLimit")).toMatch(/^"tenant";r=4;t=\d+$/);
    expect((await shop("t2", "sheddable")).status).toBe(429);
    // anything that is not a priority is default
    expect((await shop("t2", "VIP")).status).toBe(200);
  });
});
