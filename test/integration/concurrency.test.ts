import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import { call, type DemoOrigin, useStack } from "./stack.js";

// One bucket of 50 that refills one token an hour: whatever the interleaving, 50 pass.
// Decisions are Redis's however long 300 requests at once take a loaded machine (a degraded one
// would be decided by the isolate alone).
const SLUICE = {
  timeout_ms: 10_000,
  routes: [
    { name: "flash", match: "/flash", limits: [{ name: "site", key: "global", rate: 1, period: "1h", burst: 50 }] },
  ],
};

const rig = useStack({ sluice: SLUICE, instances: 3 });
let origin: DemoOrigin;
let workers: readonly Miniflare[] = [];
beforeAll(() => {
  ({ origin, workers } = rig);
});

describe("concurrency", () => {
  it("300 concurrent requests through three Worker instances: exactly 50 reach the origin", async () => {
    const results = await Promise.all(
      Array.from({ length: 300 }, (_, i) =>
        call(workers[i % 3] as Miniflare, "/flash", { ip: `10.9.${i >> 8}.${i & 255}` }),
      ),
    );
    const statuses = results.map((r) => r.status);
    const decisions = JSON.stringify(results.map((r) => `${r.status} ${r.headers.get("sluice-decision")}`).sort());
    expect(
      statuses.filter((s) => s === 200),
      decisions,
    ).toHaveLength(50);
    expect(statuses.filter((s) => s === 429)).toHaveLength(250);
    expect(origin.seen.filter((s) => s.path === "/flash")).toHaveLength(50);
    // every instance took part
    for (let w = 0; w < 3; w++) expect(results.filter((_, i) => i % 3 === w).length).toBe(100);
    expect(results.every((r) => r.headers.get("sluice-decision") === (r.status === 200 ? "allow" : "reject"))).toBe(
      true,
    );
  });
});
