import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { DAY_MS, zoneWindowAt } from "../../src/features/rate-limit/algorithms/zone-window.js";
import { call, useStack } from "./stack.js";

/*
 * `align` end to end: the Worker in workerd computes the window with its own Intl (the zone
 * database the runtime ships), the real Redis decides on it, and the RateLimit reset and
 * Retry-After count to local midnight in Beijing, where the same limit on UTC counts to UTC midnight.
 */

const SLUICE: SluiceInput = {
  timeout_ms: 5_000,
  routes: [
    {
      name: "promos",
      match: "/promos",
      limits: [
        {
          name: "daily",
          key: "header:x-merchant",
          algorithm: "fixed_window",
          rate: 1,
          period: "1d",
          align: "Asia/Shanghai",
        },
      ],
    },
    {
      name: "utc",
      match: "/utc",
      limits: [{ name: "daily", key: "header:x-merchant", algorithm: "fixed_window", rate: 1, period: "1d" }],
    },
  ],
};

const rig = useStack({ sluice: SLUICE });

/** The `t` of a RateLimit header, in seconds. */
const resetOf = (h: { get(name: string): string | null }) => Number(/;t=(\d+)$/.exec(h.get("RateLimit") ?? "")?.[1]);

/**
 * Waits out the last seconds before a window edge (Beijing's midnight, 16:00 UTC, and UTC's): the
 * test reads the real clock, and its calls must all fall in one window of each.
 */
async function clearOfEdges(marginMs = 5_000): Promise<void> {
  const edges = [16 * 3_600_000, DAY_MS];
  const sinceMidnight = Date.now() % DAY_MS;
  const next = edges.find((edge) => edge > sinceMidnight) ?? DAY_MS;
  if (next - sinceMidnight < marginMs) await new Promise((done) => setTimeout(done, next - sinceMidnight + 100));
}

/** Seconds from `ms` to the end of its window, as the headers round them. */
const toEnd = (end: number, ms: number) => Math.ceil((end - ms) / 1000);

describe("a day aligned to Asia/Shanghai, through the Worker", () => {
  it("resets and refuses until local midnight in Beijing (16:00 UTC), not UTC midnight", async () => {
    await clearOfEdges();
    const merchant = { "x-merchant": `m-${Date.now()}` };
    const before = Date.now();
    const first = await call(rig.mf, "/promos", { headers: merchant });
    const refused = await call(rig.mf, "/promos", { headers: merchant });
    const after = Date.now();
    expect(first.status).toBe(200);
    expect(refused.status).toBe(429);
    // the window as the zone database of this process draws it, around the calls (Redis shares this machine's clock)
    const end = zoneWindowAt("Asia/Shanghai", DAY_MS, before).endMs;
    expect(zoneWindowAt("Asia/Shanghai", DAY_MS, after).endMs).toBe(end);
    for (const res of [first, refused]) {
      expect(resetOf(res.headers)).toBeGreaterThanOrEqual(toEnd(end, after));
      expect(resetOf(res.headers)).toBeLessThanOrEqual(toEnd(end, before));
    }
    const retry = Number(refused.headers.get("Retry-After"));
    expect(retry).toBeGreaterThanOrEqual(toEnd(end, after));
    expect(retry).toBeLessThanOrEqual(toEnd(end, before));
    // on UTC, the same limit counts to UTC midnight: 8 hours apart, modulo the day
    const utc = await call(rig.mf, "/utc", { headers: merchant });
    const utcEnd = (Math.floor(after / DAY_MS) + 1) * DAY_MS;
    expect(resetOf(utc.headers)).toBeLessThanOrEqual(toEnd(utcEnd, before));
    expect(resetOf(utc.headers)).toBeGreaterThanOrEqual(toEnd(utcEnd, Date.now()));
    expect((utcEnd - end + DAY_MS) % DAY_MS).toBe(8 * 3_600_000);
  });
});
