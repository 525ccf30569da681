import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { loadConfig, type Limit } from "../../src/config/index.js";
import { scriptCall, type ScriptMode } from "../../src/features/rate-limit/decision/decision.js";
import { loadDecideWithTestClock } from "../support/test-clock.js";
import { DebtTokenBucketModel } from "../support/token-bucket-model.js";
import { fileRedis } from "./stack.js";

/*
 * decide.lua's "settle" mode (docs/algorithms.md, Cost from the response) against the reference model, on the
 * test clock: a take charges the reserve; a settle moves the bucket by the delta, below zero if it
 * must (debt), never above burst; every later figure (allowed, remaining, retry-after, reset)
 * matches the model, a bucket in debt refuses until exactly its retry-after, and its key outlives
 * the debt (its TTL is at least the time until full).
 */

const db = fileRedis();
let sha: string;
beforeAll(async () => {
  sha = await loadDecideWithTestClock(db.redis);
});

interface Def {
  rate: number;
  period: string;
  burst: number;
  reserve: number;
}

function compile(d: Def): Limit {
  const cost = { response: "header:x-usage-tokens", reserve: Math.min(d.reserve, d.burst), max: 10 * d.burst };
  const r = loadConfig({
    ORIGIN_URL: "https://o.example",
    SLUICE: {
      routes: [
        { name: "r", match: "/", limits: [{ name: "l", rate: d.rate, period: d.period, burst: d.burst, cost }] },
      ],
    },
  });
  if (!r.ok) throw r.error;
  return r.config.routes[0]!.limits[0]!;
}

const defArb: fc.Arbitrary<Def> = fc.record({
  rate: fc.integer({ min: 1, max: 60 }),
  period: fc.constantFrom("1ms", "7ms", "10ms", "500ms", "1s", "1m", "1h"),
  burst: fc.integer({ min: 1, max: 25 }),
  reserve: fc.integer({ min: 1, max: 25 }),
});

interface Step {
  gap: number;
  /** 0: take the reserve; 1: settle a delta; 2: peek */
  kind: number;
  delta: number;
}
const stepsArb: fc.Arbitrary<Step[]> = fc.array(
  fc.record({
    gap: fc.double({ min: 0, max: 1, noNaN: true }),
    kind: fc.constantFrom(0, 0, 1, 1, 2),
    delta: fc.double({ min: -1, max: 3, noNaN: true }),
  }),
  { minLength: 1, maxLength: 30 },
);

let run = 0;
const T0 = 1_700_000_000_000_000;

async function call(l: Limit, key: string, t: number, mode: ScriptMode, delta = 0): Promise<number[]> {
  const c = scriptCall(
    [{ limit: l, key, params: { rate: l.rate, period: l.period, burst: l.burst, cost: l.cost }, delta }],
    mode,
  );
  return (await db.redis.evalsha(sha, c.keys, [...c.args, String(Math.floor(t / 1e6)), String(t % 1e6)])) as number[];
}

describe("decide.lua's settle mode (cost from the response) against the reference model", () => {
  it("takes the reserve, settles into debt and back, every figure matches; the key outlives the debt", async () => {
    let debts = 0;
    await fc.assert(
      fc.asyncProperty(defArb, stepsArb, async (d, steps) => {
        const l = compile(d);
        const model = new DebtTokenBucketModel({ rate: l.rate, periodUs: l.period * 1000, burst: l.burst });
        const key = `rcost:${++run}`;
        let t = T0 + run * 1_000_000_000;
        for (const s of steps) {
          t += Math.floor((s.gap * 2 * l.period * 1000 * l.cost) / l.rate);
          if (s.kind === 1) {
            const delta = Math.round(s.delta * l.burst);
            model.settle(t, delta);
            expect((await call(l, key, t, "settle", delta))[0]).toBe(1);
            if (model.inDebt(t)) debts++;
            // the test clock adds a day to every TTL; what is left of it covers the time until full
            const full = model.request(t, l.cost, false).resetMs;
            if (full > 0) expect(await db.redis.pttl(key)).toBeGreaterThanOrEqual(86_400_000 + full - 5_000);
            continue;
          }
          const want = model.request(t, l.cost, s.kind === 0);
          const got = await call(l, key, t, s.kind === 0 ? "take" : "peek");
          const allowed = want.allowed ? 1 : 0;
          expect(got.slice(0, 5)).toEqual([allowed, allowed, want.remaining, want.retryAfterMs, want.resetMs]);
        }
      }),
      { numRuns: 150 },
    );
    expect(debts).toBeGreaterThan(0);
  });

  it("a bucket in debt refuses until exactly its retry-after, then admits", async () => {
    const l = compile({ rate: 10, period: "1s", burst: 10, reserve: 2 });
    const key = `rcost:${++run}`;
    const t = T0 + 5_000_000;
    expect((await call(l, key, t, "take"))[0]).toBe(1);
    await call(l, key, t, "settle", 13); // 10 - 2 - 13 = -5
    const refused = await call(l, key, t, "take");
    expect(refused.slice(0, 4)).toEqual([0, 0, 0, 700]); // 7 tokens at 10 a second
    expect((await call(l, key, t + 699_999, "take"))[0]).toBe(0);
    expect((await call(l, key, t + 700_000, "take")).slice(0, 3)).toEqual([1, 1, 0]);
  });

  it("a settle gives back no more than burst", async () => {
    const l = compile({ rate: 10, period: "1s", burst: 10, reserve: 4 });
    const key = `rcost:${++run}`;
    const t = T0 + 9_000_000;
    await call(l, key, t, "take");
    await call(l, key, t, "settle", -100);
    expect((await call(l, key, t, "peek")).slice(0, 3)).toEqual([1, 1, 10]);
  });
});
