import { compileLimits } from "../support/limits.js";
import { readFileSync } from "node:fs";
import type { Redis } from "@upstash/redis";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import type { Limit } from "../../src/config/index.js";
import { scriptCall, type ScriptMode } from "../../src/features/rate-limit/decision/decision.js";
import type { AlgoModel } from "../../src/features/rate-limit/algorithms/algorithms.js";
import { modelOf, type Algorithm } from "../../src/features/rate-limit/algorithms/registry.js";
import { warmupTokens } from "../support/warmup-model.js";
import { withTestClock } from "../support/test-clock.js";
import { fileRedis } from "./stack.js";

/*
 * decide.lua's algorithms against the reference models of src/features/rate-limit/algorithms/algorithms.ts,
 * run by a real Redis with a test clock (as in decide-lua.test.ts): every reply figure must match
 * exactly, request after request, so a request wrongly charged or wrongly spared shows up as a
 * disagreement later on.
 */

const SOURCE = readFileSync("lua/decide.lua", "utf8");

const db = fileRedis();
let redis: Redis;
let sha: string;
const script = withTestClock(SOURCE);
beforeAll(async () => {
  redis = db.redis;
  sha = await redis.scriptLoad(script);
});

type LimitDef = Record<string, unknown> & { algorithm: Algorithm };

const compile = compileLimits;

const modelFor = (l: Limit): AlgoModel =>
  modelOf({
    algorithm: l.algorithm,
    rate: l.rate,
    periodUs: l.period * 1000,
    burst: l.burst,
    maxDelayUs: l.max_delay * 1000,
    nodelay: l.nodelay,
    marginUs: (l.margin ?? 0) * 1000,
  });

let run = 0;
let entries = 0;
const freshKeys = (n: number) => {
  run++;
  return Array.from({ length: n }, (_, i) => `alg:${run}:${i}`);
};

/** KEYS and ARGV as production builds them (a per-request cost goes in `params`, as a cost header's would), plus the clock. */
function callOf(limits: Limit[], keys: string[], t: number, costs: number[], mode: ScriptMode = "take") {
  const buckets = limits.map((limit, i) => ({
    limit,
    key: keys[i] as string,
    // a sliding log's entries are named by the request (unique per call, as a request's id is)
    ...(limit.algorithm === "sliding_log" ? { entry: `e${++entries}` } : {}),
    params: { rate: limit.rate, period: limit.period, burst: limit.burst, cost: costs[i] ?? limit.cost },
  }));
  const call = scriptCall(buckets, mode);
  return { keys: call.keys, args: [...call.args, String(Math.floor(t / 1e6)), String(t % 1e6)] };
}

async function decide(
  limits: Limit[],
  keys: string[],
  t: number,
  costs: number[],
  mode: ScriptMode = "take",
): Promise<number[]> {
  const call = callOf(limits, keys, t, costs, mode);
  return (await redis.evalsha(sha, call.keys, call.args)) as number[];
}

type Step =
  { decide: [limits: Limit[], keys: string[], t: number, costs: number[], mode?: ScriptMode] } | { get: string };

/** A bucket's stored state whatever its type: a value, a sliding log's members and scores, or null. */
const SNAPSHOT = `local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'zset' then return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES') end
if kind == 'none' then return false end
return redis.call('GET', KEYS[1])`;

/** Several commands in one pipeline (one round trip, run in order, nothing else in between: this Redis is the file's own). */
async function steps(list: Step[]): Promise<unknown[]> {
  const p = redis.pipeline();
  for (const s of list) {
    if ("get" in s) p.eval(SNAPSHOT, [s.get], []);
    else {
      const call = callOf(...s.decide);
      p.evalsha(sha, call.keys, call.args);
    }
  }
  return p.exec();
}

const T0 = 1_700_000_000_000_000;
const PERIODS = ["1ms", "2ms", "7ms", "10ms", "500ms", "1s", "1m", "1h", "1d"] as const;

const tokenDef = fc.record({
  algorithm: fc.constant("token_bucket" as const),
  rate: fc.integer({ min: 1, max: 60 }),
  period: fc.constantFrom(...PERIODS),
  burst: fc.integer({ min: 1, max: 25 }),
});
const leakyDef = fc.record(
  {
    algorithm: fc.constant("leaky_bucket" as const),
    rate: fc.integer({ min: 1, max: 60 }),
    period: fc.constantFrom(...PERIODS),
    burst: fc.integer({ min: 1, max: 25 }),
    max_delay: fc.constantFrom("1ms", "20ms", "300ms", "1s", "45s", "1h"),
    nodelay: fc.boolean(),
  },
  { requiredKeys: ["algorithm", "rate", "period", "burst"] },
);
const windowDef = (algorithm: "fixed_window" | "sliding_window" | "sliding_log") =>
  fc.record({
    algorithm: fc.constant(algorithm),
    rate: fc.integer({ min: 1, max: 30 }),
    period: fc.constantFrom(...PERIODS),
  });
const MARGINS: Record<(typeof PERIODS)[number], string[]> = {
  "1ms": ["1ms"],
  "2ms": ["1ms", "2ms"],
  "7ms": ["1ms", "3ms"],
  "10ms": ["1ms", "5ms"],
  "500ms": ["1ms", "50ms"],
  "1s": ["50ms", "100ms"],
  "1m": ["50ms", "5s"],
  "1h": ["1s", "1m"],
  "1d": ["1m", "1h"],
};
/** A sliding log, with a margin (at most its period) half the time. */
const logDef = windowDef("sliding_log").chain((d) =>
  fc
    .option(fc.constantFrom(...MARGINS[d.period]), { nil: undefined })
    .map((margin) => (margin === undefined ? d : { ...d, margin })),
);
/**
 * A sliding log of up to 10,000 (the configuration's cap) taking costs up to its rate: a request of
 * any cost is one member of the log, counted by the running sum beside them (issue 29, finding 6).
 */
const bigLogDef = fc
  .record({
    algorithm: fc.constant("sliding_log" as const),
    rate: fc.integer({ min: 100, max: 10_000 }),
    period: fc.constantFrom("10ms", "500ms", "1s", "1m", "1h"),
  })
  .chain((d) =>
    fc
      .option(fc.constantFrom(...MARGINS[d.period]), { nil: undefined })
      .map((margin) => (margin === undefined ? d : { ...d, margin })),
  );
const anyDef = fc.oneof(tokenDef, leakyDef, windowDef("fixed_window"), windowDef("sliding_window"), logDef);
const withShadow = <T>(def: fc.Arbitrary<T>) => fc.tuple(def, fc.boolean()).map(([d, shadow]) => ({ ...d, shadow }));

/**
 * Arrivals: a gap (µs) before each request and one cost fraction per limit. Gaps are 0 (the same
 * instant), sub-ms, up to 1.5 emission intervals (period/rate: on average faster than the rate),
 * up to 1.5 periods of a limit of the route, or exactly at (or a ms before) the retry-after given
 * to the last refused request: each algorithm is seen saturated, draining and idle, and
 * right on the edges where rounding and boundaries decide.
 */
const arrivalsArb = (maxLimits: number, minLength = 1) =>
  fc.array(
    fc.record({
      kind: fc.constantFrom(0, 1, 2, 2, 2, 3, 4, 5),
      gap: fc.double({ min: 0, max: 1, noNaN: true }),
      which: fc.nat(),
      costs: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: maxLimits, maxLength: maxLimits }),
    }),
    { minLength, maxLength: 40 },
  );
type Arrival = { kind: number; gap: number; which: number; costs: number[] };

/** `retries`: the retry-afters (ms) of the limits that refused the last refused request. */
function gapOf(a: Arrival, limits: Limit[], retries: number[] = []): number {
  const l = limits[a.which % limits.length] as Limit;
  const periodUs = l.period * 1000;
  const retry = retries[a.which % Math.max(1, retries.length)];
  if (a.kind >= 4 && retry !== undefined && retry >= 0) return Math.max(0, retry - (a.kind - 4)) * 1000;
  if (a.kind === 0) return 0;
  if (a.kind === 1) return Math.floor(a.gap * 2000);
  if (a.kind !== 3) return Math.floor((a.gap * 1.5 * periodUs) / l.rate);
  return Math.floor(a.gap * 1.5 * periodUs);
}

/** Mostly small costs, up to the limit's capacity (larger ones are refused at load). */
const costsOf = (a: Arrival, limits: Limit[]) =>
  limits.map((l, i) => Math.min(l.burst, 1 + Math.floor((a.costs[i] ?? 0) ** 3 * l.burst)));

interface Tally {
  admitted: number;
  refused: number;
  /** refused, though some limit allowed (and so must not have been charged) */
  spared: number;
  /** admitted, though a shadow limit refused */
  shadowed: number;
}
const tallyUp = (into: Tally, t: Tally) => (Object.keys(into) as Array<keyof Tally>).forEach((k) => (into[k] += t[k]));

/**
 * Plays `arrivals` against the script and the models of `limits`, one route, and expects every
 * reply figure to match: admitted = AND of the enforced limits' verdicts, and on admission every
 * limit that allowed is charged, none otherwise. When refused, the stored buckets must also be
 * byte for byte what they were.
 */
async function playRoute(limits: Limit[], arrivals: Arrival[], start: number): Promise<Tally> {
  const models = limits.map(modelFor);
  const keys = freshKeys(limits.length);
  let t = start;
  const tally: Tally = { admitted: 0, refused: 0, spared: 0, shadowed: 0 };
  let retries: number[] = [];
  // requests charged to each limit so far: a sliding log holds at most that many members, whatever their costs
  const charged = limits.map(() => 0);
  for (const a of arrivals) {
    t += gapOf(a, limits, retries);
    const costs = costsOf(a, limits);
    const peeks = models.map((m, i) => m.peek(t, costs[i] as number));
    const admitted = peeks.every((p, i) => p.allowed || limits[i]!.shadow);
    const got = await steps([
      ...keys.map((k) => ({ get: k })),
      { decide: [limits, keys, t, costs] },
      ...keys.map((k) => ({ get: k })),
    ]);
    const [before, reply, after] = [
      got.slice(0, keys.length),
      got[keys.length] as number[],
      got.slice(keys.length + 1),
    ];
    const expected = [admitted ? 1 : 0];
    peeks.forEach((p, i) => {
      const state = admitted && p.allowed ? p.after : p.before;
      // the last three: no lease asked, none granted
      expected.push(
        p.allowed ? 1 : 0,
        state.remaining,
        p.retryAfterMs,
        state.resetMs,
        admitted && !limits[i]!.shadow ? p.delayMs : 0,
        0,
        0,
        0,
      );
    });
    expected.push(0); // last, the Redis's change counter ({key_prefix}:version), never set here
    expect(reply, `at ${t - start} µs, costs ${costs.join(",")}`).toEqual(expected);
    // what was not charged is byte for byte what it was: every bucket when refused, a refusing shadow limit's when admitted
    peeks.forEach((p, i) => (!admitted || !p.allowed) && expect(after[i], `bucket ${i} untouched`).toEqual(before[i]));
    limits.forEach((l, i) => {
      if (l.algorithm !== "sliding_log" || !Array.isArray(after[i])) return;
      const members = (after[i] as string[]).filter((_, j) => j % 2 === 0 && _ !== "#sum");
      expect(members.length, `log ${i}: one member per request`).toBeLessThanOrEqual(charged[i]! + (admitted ? 1 : 0));
    });
    if (admitted) {
      peeks.forEach((p, i) => p.allowed && charged[i]!++);
      peeks.forEach((p) => p.commit());
      tally.admitted++;
      if (peeks.some((p) => !p.allowed)) tally.shadowed++;
    } else {
      retries = peeks.filter((p) => !p.allowed).map((p) => p.retryAfterMs);
      tally.refused++;
      if (peeks.some((p) => p.allowed)) tally.spared++;
    }
  }
  return tally;
}

const startArb = fc.integer({ min: 0, max: 100_000_000_000 }).map((o) => T0 + o);

describe("decide.lua's algorithms against their reference models", () => {
  const single = (name: string, def: fc.Arbitrary<LimitDef>, arrivals = arrivalsArb(1)) =>
    it(`${name}: admitted sets and every reply figure match the model exactly`, async () => {
      const seen: Tally = { admitted: 0, refused: 0, spared: 0, shadowed: 0 };
      await fc.assert(
        fc.asyncProperty(def, arrivals, startArb, async (d, list, start) =>
          tallyUp(seen, await playRoute(compile([d]), list, start)),
        ),
        { numRuns: 150 },
      );
      // the property saw both verdicts plenty of times
      expect(Math.min(seen.admitted, seen.refused)).toBeGreaterThan(50);
    });

  single("leaky_bucket (nginx limit_req / GCRA, delays included)", leakyDef);
  single("fixed_window", windowDef("fixed_window"));
  single("sliding_window", windowDef("sliding_window"));
  single("sliding_log (exact: costs admitted in (t − period − margin, t] + cost ≤ rate)", logDef);
  // longer histories: a few large costs fill such a log, the refusals come after them
  single(
    "sliding_log with costs up to a rate of 10,000 (one member per request, its cost carried)",
    bigLogDef,
    arrivalsArb(1, 10),
  );

  it("mixed routes (2-4 limits, any algorithms, some shadow) stay all-or-nothing in one call", async () => {
    const seen: Tally = { admitted: 0, refused: 0, spared: 0, shadowed: 0 };
    await fc.assert(
      fc.asyncProperty(
        fc.array(withShadow(anyDef), { minLength: 2, maxLength: 4 }),
        arrivalsArb(4),
        startArb,
        async (defs, arrivals, start) => tallyUp(seen, await playRoute(compile(defs), arrivals, start)),
      ),
      { numRuns: 120 },
    );
    // both verdicts, refusals that spared a limit which allowed, admissions over a refusing shadow
    expect(Math.min(seen.admitted, seen.refused)).toBeGreaterThan(50);
    expect(Math.min(seen.spared, seen.shadowed)).toBeGreaterThan(30);
  });

  it("a refused request passes at exactly now + retry-after when nothing else arrives, and not a ms sooner", async () => {
    let probed = 0;
    await fc.assert(
      fc.asyncProperty(anyDef, arrivalsArb(1), startArb, async (d, arrivals, start) => {
        const limits = compile([d]);
        const keys = freshKeys(1);
        let t = start;
        let retries: number[] = [];
        for (const a of arrivals) {
          t += gapOf(a, limits, retries);
          const costs = costsOf(a, limits);
          const [, allowed, , retry] = await decide(limits, keys, t, costs);
          if (allowed === 1) continue;
          expect(retry).toBeGreaterThanOrEqual(0);
          const r = retry as number;
          retries = [r];
          probed++;
          // peeks charge nothing: the history goes on as if they had not been made
          const [then, sooner] = (await steps([
            { decide: [limits, keys, t + r * 1000, costs, "peek"] },
            { decide: [limits, keys, t + Math.max(0, r - 1) * 1000, costs, "peek"] },
          ])) as [number[], number[]];
          expect(then[1], `passes ${r} ms later`).toBe(1);
          if (r >= 1) expect(sooner[1], `refused ${r - 1} ms later`).toBe(0);
        }
      }),
      { numRuns: 120 },
    );
    expect(probed).toBeGreaterThan(50);
  });

  it("a request costing more than what is left is refused and takes nothing (leaky: one whose slot is too far)", async () => {
    let checked = 0;
    await fc.assert(
      fc.asyncProperty(
        anyDef,
        arrivalsArb(1),
        fc.double({ min: 0, max: 1, noNaN: true }),
        startArb,
        async (d, arrivals, extra, start) => {
          const limits = compile([d]);
          const l = limits[0] as Limit;
          const [key] = freshKeys(1) as [string];
          let t = start;
          let retries: number[] = [];
          for (const a of arrivals) {
            t += gapOf(a, limits, retries);
            const [, before, stored] = (await steps([
              { decide: [limits, [key], t, costsOf(a, limits)] },
              { decide: [limits, [key], t, [1], "peek"] },
              { get: key },
            ])) as [number[], number[], unknown];
            retries = before[1] === 0 ? [before[3] as number] : [];
            let cost: number;
            if (l.algorithm === "leaky_bucket") {
              // its own test ignores the cost: refused iff the request's slot lies beyond burst·T
              // (or max_delay); then any cost is refused, and takes nothing
              if (before[1] === 1) continue;
              cost = 1 + Math.floor(extra * (l.burst - 1));
            } else {
              const left = before[2] as number;
              if (left >= l.burst) continue; // nothing costs more than the capacity
              cost = left + 1 + Math.floor(extra * (l.burst - left - 1));
            }
            const [reply, after, stillPeek] = (await steps([
              { decide: [limits, [key], t, [cost]] },
              { get: key },
              { decide: [limits, [key], t, [1], "peek"] },
            ])) as [number[], unknown, number[]];
            expect(reply.slice(0, 3), `cost ${cost} with ${before[2]} left`).toEqual([0, 0, before[2]]);
            expect(after).toEqual(stored);
            expect(stillPeek).toEqual(before);
            checked++;
          }
        },
      ),
      { numRuns: 100 },
    );
    expect(checked).toBeGreaterThan(100);
  });
});

describe("token bucket warm-up", () => {
  /**
   * A greedy client: one request of cost 1 every ms of simulated time from `from` for `count` ms,
   * pipelined (the requests do not depend on the answers). Returns the admitted times (µs).
   */
  async function greedy(limits: Limit[], key: string, from: number, count: number): Promise<number[]> {
    const admitted: number[] = [];
    for (let done = 0; done < count; done += 2000) {
      const p = redis.pipeline();
      const times = Array.from({ length: Math.min(2000, count - done) }, (_, i) => from + (done + i) * 1000);
      for (const t of times) {
        const call = callOf(limits, [key], t, [1]);
        p.evalsha(sha, call.keys, call.args);
      }
      const replies = (await p.exec()) as number[][];
      replies.forEach((r, i) => r[0] === 1 && admitted.push(times[i] as number));
    }
    return admitted;
  }

  const countIn = (times: number[], from: number, to: number) => times.filter((t) => t >= from && t < to).length;

  const warmDef = fc.record({
    // W a multiple of 6 ms, so the W/6 intervals hold whole ms
    warmup: fc.constantFrom(1200, 1800, 2400),
    // 0.2 to 0.5 requests per ms at full rate: the greedy client (1 per ms) always keeps up
    perSecond: fc.integer({ min: 200, max: 500 }),
    period: fc.constantFrom(1, 2, 10),
    // at least 2, so a refill between two 1-ms requests never overflows a bucket just emptied
    burst: fc.integer({ min: 2, max: 40 }),
    // idle as a share of W: from 0.3 up to W − 1 µs (the boundary), then W up to 3 W
    idleWarm: fc.oneof(fc.constant(1), fc.double({ min: 0.3, max: 1, noNaN: true })),
    idleCold: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 2, noNaN: true })),
  });

  /*
   * Tolerance: a greedy client takes each token within a ms of its refill, so a count over an
   * interval is the refill's integral over it within one request either way (the floor at each
   * end), plus under 0.1 for the ramp's slope across that ms: ±(1 + 5%) during the ramp, ±1 after.
   */
  it("ramps from rate/3 to rate over the warm-up, then gives exactly the rate; idle < W stays warm, idle >= W restarts cold", async () => {
    await fc.assert(
      fc.asyncProperty(warmDef, startArb, async (w, start) => {
        const W = w.warmup;
        const def = {
          algorithm: "token_bucket" as const,
          rate: w.perSecond * w.period,
          period: `${w.period}s`,
          burst: w.burst,
          warmup: `${W}ms`,
        };
        const limits = compile([def]);
        const l = { rate: def.rate, periodUs: w.period * 1_000_000, warmupUs: W * 1000 };
        const [key] = freshKeys(1) as [string];
        const step = (W / 6) * 1000; // µs
        const tol = (e: number) => 1 + 0.05 * e;

        /** Counts per W/6 from a cold start at `s`: the ramp's integral, plus the one token a cold bucket starts with. */
        const expectRamp = (admitted: number[], s: number, intervals: number) => {
          for (let k = 0; k < intervals; k++) {
            const expected = warmupTokens(l, k * step, (k + 1) * step) + (k === 0 ? 1 : 0);
            const got = countIn(admitted, s + k * step, s + (k + 1) * step);
            const slack = k < 6 ? tol(expected) : 1; // after W: the full rate, within the one request a boundary can shift
            expect(
              Math.abs(got - expected),
              `interval ${k}: ${got} admitted, ${expected.toFixed(2)} expected`,
            ).toBeLessThan(slack);
          }
        };

        // 1. cold (never used): the ramp over W, then W/2 at the full rate
        const s1 = start;
        const first = await greedy(limits, key, s1, 1.5 * W);
        expectRamp(first, s1, 9);

        // 2. idle for less than W since the last admitted request: still warm, the full rate at once
        //    (plus what the idle time refilled, up to the burst)
        const last1 = first[first.length - 1] as number;
        const s2 = last1 + Math.min(Math.floor(w.idleWarm * W * 1000), W * 1000 - 1);
        const second = await greedy(limits, key, s2, W / 2);
        const refilled = Math.min(w.burst, warmupTokens(l, W * 1000, W * 1000 + (s2 - last1)));
        const expected2 = refilled + warmupTokens(l, W * 1000, W * 1000 + (W / 2) * 1000);
        expect(
          Math.abs(second.length - expected2),
          `warm after ${(s2 - last1) / 1000} ms idle: ${second.length} vs ${expected2.toFixed(2)}`,
        ).toBeLessThan(2);

        // 3. idle for W or more since the last admitted request: cold again, the same ramp
        const last2 = second[second.length - 1] as number;
        const s3 = last2 + W * 1000 + Math.floor(w.idleCold * W * 1000);
        const third = await greedy(limits, key, s3, W);
        expectRamp(third, s3, 6);
      }),
      { numRuns: 12 },
    );
  });
});
