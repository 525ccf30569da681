import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../config/index.js";
import { Demand } from "./demand.js";
import { LeaseTable, type GiveBack, type GiveBackReason } from "./leases.js";

/** A bucket as the table sees it; the route is the part of `id` before the last colon-separated pair. */
interface TestBucket {
  id: string;
  cost: number;
  capacity: number;
  holds: boolean;
}

const bucketsOf = (costs: number[]): TestBucket[] =>
  costs.map((cost, i) => ({ id: `store\u0000p:r${i % 2}:l${i}:h`, cost, capacity: 400, holds: i % 2 === 0 }));
const tableOf = (capacity: number) =>
  new LeaseTable<TestBucket>((b) => ({ id: b.id, cost: b.cost, capacity: b.capacity, holdsLeases: b.holds }), capacity);

type Step =
  | { kind: "grant"; bucket: number; tokens: number; ms: number; rtt: number; epoch: number }
  | { kind: "admit"; route: number[] }
  | { kind: "advance"; ms: number }
  | { kind: "sweep" }
  | { kind: "drop"; route: number };

const stepArb = (n: number): fc.Arbitrary<Step> =>
  fc.oneof(
    fc.record({
      kind: fc.constant("grant" as const),
      bucket: fc.nat(n - 1),
      tokens: fc.integer({ min: 0, max: 12 }),
      ms: fc.integer({ min: 0, max: 1500 }),
      rtt: fc.integer({ min: 0, max: 120 }),
      epoch: fc.integer({ min: 1, max: 4 }),
    }),
    fc.record({
      kind: fc.constant("admit" as const),
      route: fc.uniqueArray(fc.nat(n - 1), { minLength: 1, maxLength: 3 }),
    }),
    fc.record({
      kind: fc.constant("admit" as const),
      route: fc.uniqueArray(fc.nat(n - 1), { minLength: 1, maxLength: 3 }),
    }),
    fc.record({ kind: fc.constant("advance" as const), ms: fc.integer({ min: 0, max: 700 }) }),
    fc.record({ kind: fc.constant("sweep" as const) }),
    fc.record({ kind: fc.constant("drop" as const), route: fc.nat(1) }),
  );

describe("the lease table", () => {
  it("over any interleaving of grants, local admissions, give-backs, drops and expiries: admitted + returned + expired + live == granted, and admitted never exceeds granted", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 5 }),
        fc.integer({ min: 1, max: 6 }),
        fc.array(stepArb(5), { maxLength: 80 }),
        (costs, capacity, steps) => {
          const buckets = bucketsOf(costs);
          const table = tableOf(capacity);
          let now = 1_000_000;
          let granted = 0;
          let admitted = 0;
          const back: Record<GiveBackReason, number> = { expired: 0, evicted: 0, dropped: 0 };
          const collect = (gs: Array<GiveBack<TestBucket>>) => {
            for (const g of gs) {
              expect(g.close.left).toBeGreaterThan(0);
              expect(g.close.left).toBeLessThanOrEqual(g.close.granted);
              back[g.reason] += g.close.left;
            }
          };
          const live = () => buckets.reduce((sum, b) => sum + table.tokens(b, now), 0);
          const accounted = () => admitted + back.expired + back.evicted + back.dropped + live();
          const check = (swept: boolean) => {
            // between sweeps, expired leases wait in the table to be given back: not live, not yet returned
            if (swept) expect(accounted()).toBe(granted);
            else expect(accounted()).toBeLessThanOrEqual(granted);
            expect(admitted).toBeLessThanOrEqual(granted);
            expect(table.totals.granted).toBe(granted);
            expect(table.totals.admitted).toBe(admitted);
          };
          for (const s of steps) {
            if (s.kind === "grant") {
              const b = buckets[s.bucket % buckets.length] as TestBucket;
              table.settle(b, 0, { tokens: s.tokens, ms: s.ms, epoch: s.epoch }, now, now + s.rtt);
              now += s.rtt;
              granted += s.tokens;
            } else if (s.kind === "admit") {
              const route = [...new Set(s.route.map((i) => buckets[i % buckets.length] as TestBucket))];
              const before = route.map((b) => table.tokens(b, now));
              const levels = table.admit(route, now);
              if (levels) {
                route.forEach((b, i) => {
                  expect(before[i]).toBeGreaterThanOrEqual(b.cost);
                  expect(levels[i]?.tokens).toBe((before[i] as number) - b.cost);
                });
                admitted += route.reduce((sum, b) => sum + b.cost, 0);
              } else {
                // all or nothing: a route not covered takes nothing from any of its leases
                expect(route.map((b) => table.tokens(b, now))).toEqual(before);
                expect(route.some((b, i) => (before[i] as number) < b.cost)).toBe(true);
              }
            } else if (s.kind === "advance") {
              now += s.ms;
            } else if (s.kind === "drop") {
              table.dropRoute(`p:r${s.route}:`);
            } else {
              collect(table.takeGiveBacks(now));
            }
            check(s.kind === "sweep");
          }
          // once every lease has expired, nothing is live: every token granted was admitted or given back
          now += 10_000;
          collect(table.takeGiveBacks(now));
          expect(live()).toBe(0);
          expect(admitted + back.expired + back.evicted + back.dropped).toBe(granted);
        },
      ),
      { numRuns: 500 },
    );
  });

  it("never spends a lease at or after its expiry: the grant's validity from when it was sent, less two round trips and a guard", () => {
    const [b] = bucketsOf([1]) as [TestBucket];
    const table = tableOf(10);
    table.settle(b, 0, { tokens: 5, ms: 1000, epoch: 7 }, 10_000, 10_040); // valid until 10 000 + 1 000 − 2 × 40 − 10
    expect(table.admit([b], 10_909)?.[0]?.tokens).toBe(4);
    expect(table.admit([b], 10_910)).toBeUndefined();
    expect(table.takeGiveBacks(10_910)).toEqual([
      { bucket: b, close: { epoch: 7, granted: 5, left: 4 }, reason: "expired" },
    ]);
  });

  it("a grant already over when it arrives is given back at once", () => {
    const [b] = bucketsOf([1]) as [TestBucket];
    const table = tableOf(10);
    table.settle(b, 0, { tokens: 3, ms: 50, epoch: 2 }, 0, 30);
    expect(table.admit([b], 30)).toBeUndefined();
    expect(table.takeGiveBacks(30).map((g) => g.close)).toEqual([{ epoch: 2, granted: 3, left: 3 }]);
  });

  it("a bucket seen once, or in use for less than a second (a burst), asks nothing; a busy one asks its demand over the horizon, at most a quarter of its capacity, and is not asked for again while an ask is in flight", () => {
    const [b] = bucketsOf([1]) as [TestBucket];
    const table = tableOf(10);
    table.counted([b], [0], 1_000);
    expect(table.asks([b], 1_001, () => 100)).toEqual([0]);
    for (let i = 0; i < 49; i++) table.counted([b], [0], 1_010 + i);
    expect(table.asks([b], 1_100, () => 100)).toEqual([0]); // 50 in 100 ms: a burst, so far
    for (let i = 0; i < 50; i++) table.counted([b], [0], 2_000 + 10 * i); // then 50 in the next second
    expect(table.asks([b], 2_999, () => 100)).toEqual([5]); // 50 a second × 100 ms
    expect(table.asks([b], 2_999, () => 100)).toEqual([0]); // the first ask is still in flight
    table.settle(b, 5, undefined, 2_999, 3_000);
    expect(table.asks([b], 3_000, () => 100_000)).toEqual([100]); // a quarter of 400
  });

  it("asks and renewals are all or nothing across a route: none while one bucket is not worth a lease", () => {
    const [busy, quiet] = bucketsOf([1, 1]) as [TestBucket, TestBucket];
    const table = tableOf(10);
    for (let i = 0; i < 50; i++) table.counted([busy], [0], 1_000 + 20 * i);
    table.counted([quiet], [0], 1_050);
    expect(table.asks([busy, quiet], 2_000, () => 100)).toEqual([0, 0]);
    expect(table.asks([busy], 2_000, () => 100)).toEqual([5]);
  });

  it("renews below half of what the lease should hold, closing a fully spent lease of a token bucket with it", () => {
    const [b] = bucketsOf([1]) as [TestBucket];
    const table = tableOf(10);
    for (let i = 0; i < 40; i++) table.counted([b], [0], 1_000 + 25 * i); // steady, not a burst
    table.counted([b], [0], 2_000); // in use for a second: 41 in the last one
    table.settle(b, 0, { tokens: 2, ms: 1_000, epoch: 3 }, 2_000, 2_001);
    table.settle(b, 0, { tokens: 4, ms: 1_200, epoch: 4 }, 2_001, 2_002);
    expect(table.admit([b], 2_010)).toBeDefined();
    expect(table.admit([b], 2_011)).toBeDefined(); // the first grant is spent
    expect(table.renewals([b], 2_012, () => 100)).toEqual([]); // 4 left of 4 wanted
    table.admit([b], 2_013);
    table.admit([b], 2_014);
    table.admit([b], 2_015);
    const [renewal] = table.renewals([b], 2_016, () => 100);
    expect(renewal).toEqual({ bucket: b, ask: 3, close: { epoch: 3, granted: 2, left: 0 } });
    expect(table.renewals([b], 2_017, () => 100)).toEqual([]); // in flight
  });

  it("evicting the least recently used bucket gives its leftovers back", () => {
    const [a, b] = bucketsOf([1, 1]) as [TestBucket, TestBucket];
    const table = tableOf(1);
    table.settle(a, 0, { tokens: 3, ms: 1_000, epoch: 1 }, 0, 1);
    table.settle(b, 0, { tokens: 2, ms: 1_000, epoch: 1 }, 1, 2);
    expect(table.tokens(a, 2)).toBe(0);
    expect(table.takeGiveBacks(2)).toEqual([
      { bucket: a, close: { epoch: 1, granted: 3, left: 3 }, reason: "evicted" },
    ]);
  });

  it("putBack returns a replayed admission's tokens to a live lease", () => {
    const [b] = bucketsOf([2]) as [TestBucket];
    const table = tableOf(10);
    table.settle(b, 0, { tokens: 6, ms: 1_000, epoch: 1 }, 0, 1);
    table.admit([b], 2);
    table.putBack([b], 3);
    expect(table.tokens(b, 3)).toBe(6);
    expect(table.totals.admitted).toBe(0);
    table.putBack([b], 3); // nothing was spent: nothing to put back
    expect(table.tokens(b, 3)).toBe(6);
  });
});

describe("demand", () => {
  it("is nothing for the first second of use, then weights the last second's window by how much of it still overlaps; an idle window starts over", () => {
    const d = new Demand();
    d.add(10_000, 10);
    d.add(10_900, 10);
    expect(d.perSecond(10_999)).toBe(0);
    expect(d.perSecond(11_000)).toBe(20);
    expect(d.perSecond(11_250)).toBe(15);
    expect(d.perSecond(12_000)).toBe(0);
    d.add(12_100, 10);
    expect(d.perSecond(13_050)).toBe(0); // in use again since 12 100 only
    expect(d.perSecond(13_100)).toBe(9);
  });
});

describe("the `lease` field of a limit", () => {
  const limitOf = (def: Record<string, unknown>) => {
    const r = loadConfig({
      ORIGIN_URL: "https://o.example",
      SLUICE: { routes: [{ name: "r", match: "/", limits: [{ name: "l", rate: 10, period: "1s", ...def }] }] },
    });
    return r.ok ? r.config.routes[0]!.limits[0]!.lease : r.error.message;
  };

  it("is on wherever the limit can be leased, off elsewhere, and can be turned off", () => {
    expect(limitOf({})).toBe(true);
    expect(limitOf({ algorithm: "fixed_window" })).toBe(true);
    expect(limitOf({ lease: false })).toBe(false);
    for (const def of [
      { algorithm: "sliding_window" },
      { algorithm: "leaky_bucket" },
      { warmup: "1s" },
      { cost: "header:x-cost", max_cost: 5 },
      { tier: "header:x-plan", rates: { a: "5/1s" } },
    ]) {
      expect(limitOf(def), JSON.stringify(def)).toBe(false);
    }
  });

  it("cannot be asked for where it cannot apply", () => {
    expect(limitOf({ algorithm: "sliding_window", lease: true })).toMatch(
      /^SLUICE\.routes\[0\] \("r"\)\.limits\[0\] \("l"\)\.lease: applies to token_bucket/,
    );
    expect(limitOf({ scope: "split", lease: true })).toMatch(/\.lease: /);
  });
});

describe("burst-aware asks", () => {
  const horizon = () => 100;
  /** One bucket of capacity 400 (a quarter: 100) and the given cost. */
  const one = (cost: number) => bucketsOf([cost])[0] as TestBucket;

  it("a bucket's first burst asks nothing, nor a one-off burst later; from the third of bursts that recur, a lease sized for the next burst is asked", () => {
    const b = one(1);
    const table = tableOf(10);
    const burst = (at: number, n: number) => {
      for (let i = 0; i < n; i++) table.counted([b], [0], at + i);
    };
    expect(table.asks([b], 10_000, horizon)).toEqual([0]); // the first request of the first burst
    burst(10_000, 20);
    expect(table.asks([b], 10_300, horizon)).toEqual([0]); // the second: one burst seen, which may be all
    burst(10_300, 20);
    expect(table.asks([b], 10_600, horizon)).toEqual([20]); // two, 300 ms apart: the next one's size
    expect(table.asks([b], 10_600, horizon)).toEqual([0]); // in flight
    table.settle(b, 20, { tokens: 20, ms: 1_000, epoch: 1 }, 10_600, 10_620);
    burst(10_600, 20);
    // the next burst is decided here, and the lease renewed once spent (not at half: the burst needs all of it)
    for (let i = 0; i < 19; i++) {
      expect(table.admit([b], 10_900 + i)).toBeDefined();
      expect(table.renewals([b], 10_900 + i, horizon)).toEqual([]);
    }
    expect(table.admit([b], 10_919)).toBeDefined();
    expect(table.renewals([b], 10_919, horizon)).toEqual([
      { bucket: b, ask: 20, close: { epoch: 1, granted: 20, left: 0 } },
    ]);
  });

  /**
   * One isolate's table for bucket `b`, driven as src/features/rate-limit/isolate/lease-broker.ts
   * drives it, on a test clock: a request is admitted from the lease (renewing it if the table says
   * so) or sent to Redis as a take with the table's ask; every call's reply lands `rttMs` later,
   * granting all it asked for `leaseMs`; what the table has to give back is sent whenever time
   * moves on. decide.lua's calls are counted by mode.
   */
  const isolateOf = (b: TestBucket, rttMs: number, leaseMs = 1_000) => {
    const table = tableOf(10);
    const calls = { take: 0, lease: 0, return: 0 };
    const asked: number[] = [];
    const renewed: number[] = [];
    let landing: Array<{ at: number; land: () => void }> = [];
    let epoch = 0;
    const send = (sentAt: number, ask: number, admitted: boolean) =>
      landing.push({
        at: sentAt + rttMs,
        land: () => {
          const grant = ask > 0 ? { tokens: ask, ms: leaseMs, epoch: ++epoch } : undefined;
          table.settle(b, ask, grant, sentAt, sentAt + rttMs);
          if (admitted) table.counted([b], [0], sentAt + rttMs);
        },
      });
    /** The replies due by `now` land, and what is due to be given back is sent. */
    const at = (now: number) => {
      landing.sort((x, y) => x.at - y.at);
      while (landing.length > 0 && (landing[0] as { at: number }).at <= now) landing.shift()?.land();
      landing = landing.filter((l) => l.at > now);
      calls.return += table.takeGiveBacks(now).length;
    };
    const request = (now: number): "local" | "central" => {
      at(now);
      if (table.admit([b], now)) {
        for (const r of table.renewals([b], now, horizon)) {
          calls.lease++;
          renewed.push(r.ask);
          send(now, r.ask, false);
        }
        return "local";
      }
      const [ask = 0] = table.asks([b], now, horizon);
      asked.push(ask);
      calls.take++;
      send(now, ask, true);
      return "central";
    };
    /** `n` requests at once (1 ms apart, as concurrent requests reach an isolate): how each was decided. */
    const burst = (start: number, n: number) => Array.from({ length: n }, (_, i) => request(start + i));
    return { table, calls, asked, renewed, at, request, burst };
  };

  it("a one-off burst is decided centrally, asks no lease and leaves nothing to give back, whether its requests come at once or one after another's answer", () => {
    for (const spacing of [1, 20]) {
      const isolate = isolateOf(one(1), 20);
      const decided = Array.from({ length: 10 }, (_, i) => isolate.request(10_000 + spacing * i));
      expect(decided).toEqual(Array(10).fill("central"));
      isolate.at(12_000);
      expect(isolate.asked).toEqual(Array(10).fill(0));
      expect(isolate.calls).toEqual({ take: 10, lease: 0, return: 0 });
      expect(isolate.table.tokens(one(1), 12_000)).toBe(0);
      expect(isolate.request(12_000)).toBe("central"); // a request after it alone: still no burst that recurs
      expect(isolate.asked.at(-1)).toBe(0);
    }
  });

  it("a one-off burst whose answers a busy machine spreads into two runs 100 ms or more apart is two bursts to the isolate: a request after them asks a lease", () => {
    const b = one(1);
    const table = tableOf(10);
    for (let i = 0; i < 5; i++) table.counted([b], [0], 10_000 + i);
    expect(table.asks([b], 10_120, horizon)).toEqual([0]);
    for (let i = 0; i < 5; i++) table.counted([b], [0], 10_150 + i);
    expect(table.asks([b], 10_200, horizon)).toEqual([5]);
  });

  it("bursts of 10 every 300 ms: the first two central, then a lease the size of a burst, from which the later bursts are decided, renewed once spent", () => {
    const b = one(1);
    const isolate = isolateOf(b, 20);
    const perBurst: Array<{ central: number; take: number; lease: number }> = [];
    for (let k = 0; k < 8; k++) {
      const before = { ...isolate.calls };
      const decided = isolate.burst(10_000 + 300 * k, 10);
      perBurst.push({
        central: decided.filter((d) => d === "central").length,
        take: isolate.calls.take - before.take,
        lease: isolate.calls.lease - before.lease,
      });
    }
    const central = { central: 10, take: 10, lease: 0 };
    const leased = { central: 0, take: 0, lease: 1 };
    // the third's requests all reach the isolate before the lease its first asked for is back
    expect(perBurst).toEqual([central, central, central, leased, leased, leased, leased, leased]);
    // asked by the third burst's first request, the size of a burst; each renewal the same, sent
    // once the lease is spent (its last request), not at half
    expect(isolate.asked).toEqual([...Array(20).fill(0), 10, ...Array(9).fill(0)]);
    expect(isolate.renewed).toEqual(Array(5).fill(10));
    // every lease granted was spent or given back
    isolate.at(20_000);
    expect(isolate.table.totals.granted).toBe(
      isolate.table.totals.admitted + Object.values(isolate.table.totals.givenBack).reduce((x, y) => x + y, 0),
    );
  });

  it("a steady client, a sparse one, bursts more than a second apart and runs longer than a burst ask by demand alone", () => {
    const cases: Array<{ times: number[]; at: number }> = [
      { times: Array.from({ length: 60 }, (_, i) => 1_000 + 15 * i), at: 1_900 }, // 66/s: one run, a second old
      { times: Array.from({ length: 10 }, (_, i) => 1_000 + 300 * i), at: 4_000 }, // runs of one request
      {
        times: [...Array.from({ length: 10 }, (_, i) => 1_000 + i), ...Array.from({ length: 10 }, (_, i) => 2_200 + i)],
        at: 2_500,
      },
      {
        times: [
          ...Array.from({ length: 20 }, (_, i) => 1_000 + 20 * i),
          ...Array.from({ length: 20 }, (_, i) => 1_600 + 20 * i),
        ],
        at: 2_000,
      },
    ];
    for (const { times, at } of cases) {
      const b = one(1);
      const table = tableOf(10);
      const demand = new Demand();
      for (const t of times) {
        table.counted([b], [0], t);
        demand.add(t, 1);
      }
      const steady = Math.floor(demand.perSecond(at) / 10);
      expect(table.asks([b], at, horizon)).toEqual([steady >= 1 ? steady : 0]);
    }
  });

  it("over any history of admissions, what a central take asks is the reference policy's: max(demand × horizon, the peak of the last two bursts when they recur), at most a quarter of the capacity, nothing below one request; a history of one run never asks more than demand", () => {
    const group = fc.record({
      gap: fc.integer({ min: 1, max: 1_500 }),
      count: fc.integer({ min: 1, max: 40 }),
      spacing: fc.integer({ min: 0, max: 60 }),
    });
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 3 }),
        fc.array(group, { minLength: 1, maxLength: 8 }),
        fc.integer({ min: 0, max: 1_500 }),
        fc.integer({ min: 100, max: 400 }),
        (cost, groups, askAfter, horizonMs) => {
          const times: number[] = [];
          let t = 50_000;
          for (const g of groups) {
            t += g.gap;
            for (let i = 0; i < g.count; i++) times.push((t += i === 0 ? 0 : g.spacing));
          }
          const now = t + askAfter;
          const b = one(cost);
          const table = tableOf(10);
          const demand = new Demand();
          for (const at of times) {
            table.counted([b], [0], at);
            demand.add(at, cost);
          }
          const steady = Math.floor((demand.perSecond(now) * horizonMs) / 1000);
          const runs = runsOf(times, cost);
          const [prev, last] = runs.slice(-2);
          const burst = (r: RefRun) => r.size >= 2 * cost && r.end - r.start <= 250;
          const recur =
            prev && last && now - last.start <= 1_000 && last.start - prev.start <= 1_000 && burst(prev) && burst(last);
          const peak = recur ? Math.max(prev.size, last.size) : 0;
          const target = Math.min(Math.max(steady, peak), 100);
          const [ask] = table.asks([b], now, () => horizonMs);
          expect(ask).toBe(target >= cost ? target : 0);
          expect(ask).toBeLessThanOrEqual(100);
          if (runs.length === 1) expect(ask).toBe(steady >= cost ? Math.min(steady, 100) : 0);
        },
      ),
      { numRuns: 500 },
    );
  });
});

interface RefRun {
  start: number;
  end: number;
  size: number;
}

/** The reference split of admission times into runs: a gap of 100 ms or more starts one; its size is what was admitted within 100 ms of its first. */
function runsOf(times: number[], cost: number): RefRun[] {
  const runs: RefRun[] = [];
  times.forEach((t, i) => {
    if (i === 0 || t - (times[i - 1] as number) >= 100) runs.push({ start: t, end: t, size: 0 });
    const r = runs.at(-1) as RefRun;
    r.end = t;
    if (t - r.start < 100) r.size += cost;
  });
  return runs;
}
