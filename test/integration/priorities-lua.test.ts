import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { loadConfig, type Limit } from "../../src/config/index.js";
import { scriptCall, type ScriptMode } from "../../src/features/rate-limit/decision/decision.js";
import { modelOf, type Algorithm } from "../../src/features/rate-limit/algorithms/registry.js";
import { loadDecideWithTestClock } from "../support/test-clock.js";
import { fileRedis } from "./stack.js";

/*
 * decide.lua's floor (docs/algorithms.md, Priorities: the capacity a limit reserves for priorities above the
 * request's) against the reference models: a request is admitted iff the model, asked about
 * `cost + floor` (concurrency: `1 + floor` free slots), admits it, it is then charged `cost`
 * alone, and a refused request passes at exactly its retry-after, not a ms sooner.
 */

const db = fileRedis();
let sha: string;
beforeAll(async () => {
  sha = await loadDecideWithTestClock(db.redis);
});

type LimitDef = Record<string, unknown> & { algorithm: Algorithm };

function compile(d: LimitDef): Limit {
  const r = loadConfig({
    ORIGIN_URL: "https://o.example",
    SLUICE: { routes: [{ name: "r", match: "/", limits: [{ name: "l", ...d }] }] },
  });
  if (!r.ok) throw r.error;
  return r.config.routes[0]!.limits[0]!;
}

let run = 0;
let entries = 0;
const T0 = 1_700_000_000_000_000;
const PERIODS = ["1ms", "7ms", "10ms", "500ms", "1s", "1m", "1h"] as const;

const defArb: fc.Arbitrary<LimitDef> = fc.oneof(
  fc.record({
    algorithm: fc.constant("token_bucket" as const),
    rate: fc.integer({ min: 1, max: 60 }),
    period: fc.constantFrom(...PERIODS),
    burst: fc.integer({ min: 1, max: 25 }),
  }),
  fc.record({
    algorithm: fc.constant("leaky_bucket" as const),
    rate: fc.integer({ min: 1, max: 60 }),
    period: fc.constantFrom(...PERIODS),
    burst: fc.integer({ min: 1, max: 25 }),
    nodelay: fc.boolean(),
  }),
  fc.record({
    algorithm: fc.constantFrom("fixed_window" as const, "sliding_window" as const, "sliding_log" as const),
    rate: fc.integer({ min: 1, max: 30 }),
    period: fc.constantFrom(...PERIODS),
  }),
);

interface Arrival {
  gap: number;
  kind: number;
  cost: number;
  floor: number;
}
const arrivalsArb = fc.array(
  fc.record({
    gap: fc.double({ min: 0, max: 1, noNaN: true }),
    kind: fc.constantFrom(0, 0, 0, 1, 2, 2, 3),
    cost: fc.double({ min: 0, max: 1, noNaN: true }),
    floor: fc.double({ min: 0, max: 1, noNaN: true }),
  }),
  { minLength: 1, maxLength: 30 },
);

const capacityOf = (l: Limit) => (l.algorithm === "token_bucket" || l.algorithm === "leaky_bucket" ? l.burst : l.rate);

function gapOf(a: Arrival, l: Limit): number {
  if (a.kind === 0) return 0;
  if (a.kind === 1) return Math.floor(a.gap * 2000);
  if (a.kind === 2) return Math.floor((a.gap * 1.5 * l.period * 1000) / l.rate);
  return Math.floor(a.gap * 1.5 * l.period * 1000);
}

/** An arrival's cost (mostly small, up to the burst) and the floor its priority leaves, a share of the capacity. */
function costAndFloor(a: Arrival, l: Limit): { cost: number; floor: number } {
  return { cost: Math.min(l.burst, 1 + Math.floor(a.cost ** 3 * l.burst)), floor: Math.floor(a.floor * capacityOf(l)) };
}

function callOf(l: Limit, key: string, t: number, cost: number, floor: number, mode: ScriptMode, slot?: string) {
  const params = { rate: l.rate, period: l.period, burst: l.burst, cost, floor };
  // a sliding log's entries are named by the request, one id per call
  const entry = l.algorithm === "sliding_log" ? { entry: `e${++entries}` } : {};
  const call = scriptCall([{ limit: l, key, params, ...entry, ...(slot === undefined ? {} : { slot }) }], mode);
  return [call.keys, [...call.args, String(Math.floor(t / 1e6)), String(t % 1e6)]] as const;
}

async function decide(l: Limit, key: string, t: number, cost: number, floor: number, mode: ScriptMode = "take") {
  const slot = l.algorithm === "concurrency" ? `s${t}` : undefined;
  const [keys, args] = callOf(l, key, t, cost, floor, mode, mode === "peek" ? undefined : slot);
  return (await db.redis.evalsha(sha, [...keys], [...args])) as number[];
}

describe("decide.lua's floor (priorities) against the reference models", () => {
  it("admitted iff the model admits cost + floor; charged cost alone; every figure matches", async () => {
    const seen = { admitted: 0, refused: 0, refusedByFloor: 0 };
    await fc.assert(
      fc.asyncProperty(defArb, arrivalsArb, async (d, arrivals) => {
        const l = compile(d);
        const model = modelOf({ ...l, periodUs: l.period * 1000, maxDelayUs: l.max_delay * 1000 });
        const key = `prio:${++run}`;
        const capacity = capacityOf(l);
        let t = T0 + run * 1_000_000_000;
        for (const a of arrivals) {
          t += gapOf(a, l);
          const { cost, floor } = costAndFloor(a, l);
          const gate = model.peek(t, cost + floor);
          const own = model.peek(t, cost);
          const reply = await decide(l, key, t, cost, floor);
          const state = gate.allowed ? own.after : own.before;
          expect(reply.slice(0, 6), `cost ${cost} floor ${floor}`).toEqual([
            gate.allowed ? 1 : 0,
            gate.allowed ? 1 : 0,
            Math.max(0, state.remaining - floor),
            // more than the capacity can never pass: the model, never asked that, counts on regardless
            gate.allowed ? 0 : cost + floor > capacity ? -1 : gate.retryAfterMs,
            state.resetMs,
            gate.allowed ? own.delayMs : 0,
          ]);
          if (gate.allowed) {
            own.commit();
            seen.admitted++;
          } else {
            seen.refused++;
            if (own.allowed) seen.refusedByFloor++;
          }
        }
      }),
      { numRuns: 150 },
    );
    // both verdicts plenty of times, and requests the floor alone refused (their own cost would pass)
    expect(Math.min(seen.admitted, seen.refused), JSON.stringify(seen)).toBeGreaterThan(50);
    expect(seen.refusedByFloor, JSON.stringify(seen)).toBeGreaterThan(0);
  });

  it("a request refused at its floor passes at exactly now + retry-after, not a ms sooner", async () => {
    let probed = 0;
    await fc.assert(
      fc.asyncProperty(defArb, arrivalsArb, async (d, arrivals) => {
        const l = compile(d);
        const key = `prio:${++run}`;
        const capacity = capacityOf(l);
        let t = T0 + run * 1_000_000_000;
        for (const a of arrivals) {
          t += gapOf(a, l);
          const { cost, floor } = costAndFloor(a, l);
          const [, allowed, , retry] = (await decide(l, key, t, cost, floor)) as number[];
          if (allowed === 1) continue;
          const r = retry as number;
          if (cost + floor > capacity) {
            expect(r, "never: cost + floor exceeds the capacity").toBe(-1);
            continue;
          }
          expect(r).toBeGreaterThanOrEqual(0);
          probed++;
          const [, then] = await decide(l, key, t + r * 1000, cost, floor, "peek");
          expect(then, `passes ${r} ms later`).toBe(1);
          if (r >= 1) {
            const [, sooner] = await decide(l, key, t + (r - 1) * 1000, cost, floor, "peek");
            expect(sooner, `refused ${r - 1} ms later`).toBe(0);
          }
        }
      }),
      { numRuns: 100 },
    );
    expect(probed).toBeGreaterThan(20);
  });

  it("concurrency: admitted only while 1 + floor slots are free; retry-after is when enough expire", async () => {
    const l = compile({ algorithm: "concurrency", limit: 5, lease: "1s" });
    const key = `prio:${++run}`;
    const t = T0;
    // three slots taken at t, t + 100 ms, t + 200 ms by default traffic
    for (const [i, at] of [t, t + 100_000, t + 200_000].entries())
      expect((await decide(l, key, at, 1, 0))[1], `slot ${i}`).toBe(1);
    // floor 2: 2 free, 1 + 2 needed: refused until the first slot expires (t + 1 s)
    const refused = await decide(l, key, t + 300_000, 1, 2);
    // 2 free, both the floor's: 0 left for this request
    expect(refused.slice(0, 4)).toEqual([0, 0, 0, 700]);
    expect((await decide(l, key, t + 999_000, 1, 2, "peek"))[1]).toBe(0);
    expect((await decide(l, key, t + 1_000_000, 1, 2, "peek"))[1]).toBe(1);
    // critical (floor 0) passes at once; a floor of the whole limit never does
    expect((await decide(l, key, t + 300_000, 1, 0))[1]).toBe(1);
    expect((await decide(l, key, t + 300_000, 1, 5)).slice(0, 4)).toEqual([0, 0, 0, -1]);
  });

  it("an override's capacity scales the floor: ceil(floor × capacity' / capacity)", async () => {
    const l = compile({ algorithm: "fixed_window", rate: 10, period: "1h" });
    const key = `prio:${++run}`;
    const t = T0 + 10_000_000;
    const until = Math.floor(t / 1000) + 3_600_000;
    const override = { everybody: `20:20:3600000:${until}`, own: "" };
    const call = (count: number, floor: number, at: number) => {
      const params = { rate: l.rate, period: l.period, burst: l.burst, cost: count, floor };
      const c = scriptCall([{ limit: l, key, params, override }], "take");
      return db.redis.evalsha(sha, c.keys, [...c.args, String(Math.floor(at / 1e6)), String(at % 1e6)]) as Promise<
        number[]
      >;
    };
    // floor 3 of 10 becomes 6 of 20: 14 pass, the 15th would leave 5
    expect((await call(14, 3, t))[1]).toBe(1);
    expect((await call(1, 3, t))[1]).toBe(0);
    expect((await call(1, 0, t))[1]).toBe(1);
  });
});
