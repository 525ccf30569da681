import { readFileSync } from "node:fs";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import type { Limit } from "../../src/config/index.js";
import { scriptCall } from "../../src/features/rate-limit/decision/decision.js";
import type { AlgoModel } from "../../src/features/rate-limit/algorithms/algorithms.js";
import { modelOf } from "../../src/features/rate-limit/algorithms/registry.js";
import { compileLimits } from "../support/limits.js";
import { withTestClock } from "../support/test-clock.js";
import { fileRedis } from "./stack.js";

/*
 * The scripts on a clock the caller passes ("clock:{µs}", the last ARGV: what a store sends where
 * Redis refuses TIME in scripts), run by a real Redis. Isolates' clocks disagree, run backwards and
 * jump; the scripts hold each key's state monotone: a limit is decided at max(clock, the time its
 * key last recorded), so it is exactly the reference model on that timeline, no refill is ever
 * counted twice, and in any stretch of time a token bucket admits no more than burst + rate ×
 * (the stretch + the most any clock ran ahead + the most any ran behind). Without the floor, every
 * request on a clock behind rewound the bucket and the next one refilled the same time again.
 */

const db = fileRedis();
// decide.lua with TTLs a day longer (the simulated clock is not Redis's); its TIME is never read here
const DECIDE = withTestClock(readFileSync("lua/decide.lua", "utf8"));
const IDEMPOTENCY = readFileSync("lua/idempotency.lua", "utf8");
const SESSION = readFileSync("lua/session.lua", "utf8");
const sha = { decide: "", idem: "", session: "" };
beforeAll(async () => {
  sha.decide = await db.redis.scriptLoad(DECIDE);
  sha.idem = await db.redis.scriptLoad(IDEMPOTENCY);
  sha.session = await db.redis.scriptLoad(SESSION);
});

const T0 = 1_764_000_000_000_000; // µs
const clockArg = (us: number) => `clock:${us}`;
let run = 0;
let entries = 0;

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

/** One take of `limit` on key `key`, on the passed clock `clockUs`. */
async function take(limit: Limit, key: string, clockUs: number): Promise<number[]> {
  const call = scriptCall(
    [{ limit, key, ...(limit.algorithm === "sliding_log" ? { entry: `e${++entries}` } : {}) }],
    "take",
  );
  return (await db.redis.evalsha(sha.decide, call.keys, [...call.args, clockArg(clockUs)])) as number[];
}

const PERIODS = ["10ms", "500ms", "1s", "1m", "1h"] as const;
const limitArb = fc.oneof(
  fc.record({
    algorithm: fc.constant("token_bucket"),
    rate: fc.integer({ min: 1, max: 20 }),
    period: fc.constantFrom(...PERIODS),
    burst: fc.integer({ min: 1, max: 10 }),
  }),
  fc.record({
    algorithm: fc.constant("leaky_bucket"),
    rate: fc.integer({ min: 1, max: 20 }),
    period: fc.constantFrom(...PERIODS),
    burst: fc.integer({ min: 1, max: 10 }),
    nodelay: fc.constant(true),
  }),
  fc.record({
    algorithm: fc.constant("sliding_log"),
    rate: fc.integer({ min: 1, max: 10 }),
    period: fc.constantFrom(...PERIODS),
  }),
);

/**
 * Requests: a real-time gap (in emission intervals, period / rate) before each, and the error of
 * the clock the request is decided on (in periods): most clocks right, some behind or ahead by a
 * little, some by more than a period (a clock that jumped), in any order, so the clocks run
 * backwards as often as forwards.
 */
const requestsArb = fc.array(
  fc.record({
    gap: fc.double({ min: 0, max: 2, noNaN: true }),
    error: fc.oneof(
      fc.constant(0),
      fc.double({ min: -0.2, max: 0.2, noNaN: true }),
      fc.double({ min: -3, max: 3, noNaN: true }),
    ),
  }),
  { minLength: 1, maxLength: 40 },
);

describe("decide.lua on a passed clock", () => {
  it("decides each limit exactly as its model at max(clock, its key's last time): the key never goes back", async () => {
    await fc.assert(
      fc.asyncProperty(limitArb, requestsArb, async (def, requests) => {
        const [limit] = compileLimits([def]) as [Limit];
        const model = modelFor(limit);
        const key = `clk:${++run}`;
        const periodUs = limit.period * 1000;
        let t = T0;
        // the time of the key's last write: a take that was admitted (a refusal writes nothing)
        let written = -Infinity;
        for (const r of requests) {
          t += Math.floor((r.gap * periodUs) / limit.rate);
          const clock = t + Math.round(r.error * periodUs);
          const at = Math.max(clock, written);
          const p = model.peek(at, limit.cost);
          const reply = await take(limit, key, clock);
          const state = p.allowed ? p.after : p.before;
          expect(reply.slice(0, 6), `${def.algorithm} at ${t - T0} µs, clock ${clock - t}`).toEqual([
            p.allowed ? 1 : 0,
            p.allowed ? 1 : 0,
            state.remaining,
            p.retryAfterMs,
            state.resetMs,
            p.allowed ? p.delayMs : 0,
          ]);
          if (p.allowed) {
            p.commit();
            written = at;
          }
        }
      }),
      { numRuns: 120 },
    );
  });

  it("a token bucket admits in any stretch of time no more than burst + rate × (stretch + the clocks' spread)", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          rate: fc.integer({ min: 1, max: 20 }),
          period: fc.constantFrom(...PERIODS),
          burst: fc.integer({ min: 1, max: 10 }),
        }),
        requestsArb,
        async (def, requests) => {
          const [limit] = compileLimits([{ algorithm: "token_bucket", ...def }]) as [Limit];
          const key = `clk:${++run}`;
          const periodUs = limit.period * 1000;
          let t = T0;
          let [ahead, behind] = [0, 0];
          // the real times of the admitted requests
          const admitted: number[] = [];
          for (const r of requests) {
            t += Math.floor((r.gap * periodUs) / limit.rate);
            const error = Math.round(r.error * periodUs);
            [ahead, behind] = [Math.max(ahead, error), Math.max(behind, -error)];
            if ((await take(limit, key, t + error))[0] === 1) admitted.push(t);
          }
          // the key's time is max(clock, its last), so between two admissions it moves by at most
          // the real time between them plus how far one clock ran ahead and another behind
          for (let j = 0; j < admitted.length; j++)
            for (let k = j; k < admitted.length; k++) {
              const stretch = (admitted[k] as number) - (admitted[j] as number);
              const taken = (k - j + 1) * limit.cost * periodUs;
              expect(
                taken,
                `${k - j + 1} in ${stretch} µs, clocks ${ahead} ahead, ${behind} behind`,
              ).toBeLessThanOrEqual(limit.burst * periodUs + limit.rate * (stretch + ahead + behind));
            }
        },
      ),
      { numRuns: 120 },
    );
  });

  it("a request on a clock 10 s behind does not hand the next ones 10 s of refill, however often it comes", async () => {
    // rate 1 a second, burst 3: a request every 0.1 s, every fifth on a clock 10 s behind
    const [limit] = compileLimits([{ algorithm: "token_bucket", rate: 1, period: "1s", burst: 3 }]) as [Limit];
    const correct = modelFor(limit);
    const key = `clk:${++run}`;
    let [admitted, admittedCorrectly] = [0, 0];
    for (let i = 0; i < 20; i++) {
      const t = T0 + i * 100_000;
      admitted += (await take(limit, key, i % 5 === 1 ? t - 10_000_000 : t))[0] as number;
      const p = correct.peek(t, 1);
      if (p.allowed) {
        p.commit();
        admittedCorrectly++;
      }
    }
    // stamped 10 s back, the bucket would be full again at the next request on a right clock: 3 more each time
    expect(admittedCorrectly).toBe(4);
    expect(admitted).toBeLessThanOrEqual(admittedCorrectly);
  });

  it("a slot taken on a clock behind expires no earlier than the slots already held", async () => {
    const [limit] = compileLimits([{ algorithm: "concurrency", limit: 3, lease: "10s" }]) as [Limit];
    const key = `clk:${++run}`;
    const slot = (id: string, clockUs: number) => {
      const call = scriptCall([{ limit, key, slot: id }], "take");
      return db.redis.evalsha(sha.decide, call.keys, [...call.args, clockArg(clockUs)]) as Promise<number[]>;
    };
    expect((await slot("a", T0))[0]).toBe(1);
    expect((await slot("b", T0 - 4_000_000))[0]).toBe(1);
    expect(await db.redis.get(key)).toBe(`c:a@${T0 + 10_000_000},b@${T0 + 10_000_000}`);
  });
});

describe("idempotency.lua and session.lua on a passed clock", () => {
  const idemKeys = () => {
    run++;
    // the route's one fencing key, whatever the record
    return [`clk:idem:${run}:rec`, "clk:idem:fence", "clk:ledger", `clk:idem:${run}:replays`];
  };
  const idem = (keys: string[], op: string, rest: Array<string | number>, clockUs: number) =>
    db.redis.evalsha(sha.idem, keys, [op, "owner-1", "r", "h", 100, ...rest, "{}", clockArg(clockUs)]) as Promise<
      unknown[]
    >;

  it("fencing tokens rise strictly as the clocks jump back and forth", async () => {
    const clocks = [T0, T0 - 5_000_000, T0 - 5_000_000, T0 + 1_000, T0 - 60_000_000, T0 + 2_000];
    const fences: number[] = [];
    const sessions: number[] = [];
    for (const [i, clock] of clocks.entries()) {
      const keys = idemKeys();
      const [kind, fence] = await idem(keys, "claim", ["fp", 30_000, 600_000, 1_000_000, 1], clock);
      expect(kind).toBe("claimed");
      fences.push(Number(fence));
      const [granted, token] = (await db.redis.evalsha(
        sha.session,
        [`clk:session:${run}:${i}`, "clk:session:fence", "clk:ledger"],
        ["acquire", "o", "r", "h", 100, 30_000, 0, clockArg(clock)],
      )) as unknown[];
      expect(granted).toBe("granted");
      sessions.push(Number(token));
    }
    for (let i = 1; i < clocks.length; i++) {
      expect(fences[i]).toBeGreaterThan(fences[i - 1] as number);
      expect(sessions[i]).toBeGreaterThan(sessions[i - 1] as number);
    }
  });

  it("a renewal on a clock behind never shortens the lease; the ledger context is still read beside the clock", async () => {
    const keys = idemKeys();
    expect((await idem(keys, "claim", ["fp", 30_000, 600_000, 1_000_000, 1], T0))[0]).toBe("claimed");
    const leaseUntil = () => db.redis.hget(keys[0] as string, "lease_until").then(Number);
    const start = T0 / 1000 + 30_000;
    expect(await leaseUntil()).toBe(start);
    expect(await idem(keys, "renew", [30_000], T0 - 10_000_000)).toEqual(["ok"]);
    expect(await leaseUntil()).toBe(start);
    expect(await idem(keys, "renew", [30_000], T0 + 5_000_000)).toEqual(["ok"]);
    expect(await leaseUntil()).toBe(start + 5_000);
    // the context (last but the clock) reaches the ledger
    const context = JSON.stringify({ trace: "00-aaaa-bbbb-01" });
    await db.redis.evalsha(sha.idem, keys, ["release", "owner-1", "r", "h", 100, "", context, clockArg(T0)]);
    const [entry] = (await db.redis.xrevrange("clk:ledger", "+", "-", 1)) as unknown as Array<[string, string[]]>;
    expect(JSON.stringify(entry)).toContain("00-aaaa-bbbb-01");
  });
});
