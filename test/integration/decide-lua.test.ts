import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { loadConfig, type Limit } from "../../src/config/index.js";
import { scriptCall } from "../../src/features/rate-limit/decision/decision.js";
import { TokenBucketModel } from "../support/token-bucket-model.js";
import { withTestClock } from "../support/test-clock.js";
import { fileRedis } from "./stack.js";

const SOURCE = readFileSync("lua/decide.lua", "utf8");

const db = fileRedis();

function compileLimits(
  defs: Array<{ rate: number; period: string; burst: number; cost: number; shadow: boolean }>,
): Limit[] {
  const r = loadConfig({
    ORIGIN_URL: "https://o.example",
    SLUICE: { routes: [{ name: "r", match: "/", limits: defs.map((d, i) => ({ name: `l${i}`, ...d })) }] },
  });
  if (!r.ok) throw r.error;
  return r.config.routes[0]!.limits;
}

const callOf = (limits: Limit[], keys: string[], t: number) => {
  const call = scriptCall(
    limits.map((limit, i) => ({ limit, key: keys[i] as string })),
    "take",
  );
  return { keys: call.keys, args: [...call.args, String(Math.floor(t / 1e6)), String(t % 1e6)] };
};

const limitArb = fc.record({
  rate: fc.integer({ min: 1, max: 60 }),
  period: fc.constantFrom("1ms", "7ms", "500ms", "1s", "1m", "1h", "1d"),
  burst: fc.integer({ min: 1, max: 25 }),
  costFraction: fc.double({ min: 0, max: 1, noNaN: true }),
  shadow: fc.boolean(),
});

describe("decide.lua against the reference model", () => {
  const script = withTestClock(SOURCE);
  let run = 0;

  it("admits exactly what the model admits, with the same remaining, retry-after and reset", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(limitArb, { minLength: 1, maxLength: 3 }),
        fc.array(fc.integer({ min: 0, max: 3_000_000 }), { minLength: 1, maxLength: 30 }),
        async (defs, gaps) => {
          const limits = compileLimits(
            defs.map(({ costFraction, ...d }) => ({ ...d, cost: Math.max(1, Math.ceil(costFraction * d.burst)) })),
          );
          const models = limits.map(
            (l) => new TokenBucketModel({ rate: l.rate, periodUs: l.period * 1000, burst: l.burst, cost: l.cost }),
          );
          const keys = limits.map((_, i) => `prop:${run}:${i}`);
          run++;
          let t = 1_700_000_000_000_000;
          for (const gap of gaps) {
            t += gap;
            const call = callOf(limits, keys, t);
            const reply = (await db.redis.eval(script, call.keys, call.args)) as number[];
            const peeks = models.map((m) => m.peek(t));
            const admitted = peeks.every((p, i) => p.allowed || limits[i]!.shadow);
            if (admitted) peeks.forEach((p) => p.allowed && p.commit());
            expect(reply[0]).toBe(admitted ? 1 : 0);
            peeks.forEach((p, i) => {
              const state = admitted && p.allowed ? p.after : p.before;
              // eight figures per limit; no lease asked, none granted
              expect(reply.slice(1 + 8 * i, 9 + 8 * i)).toEqual([
                p.allowed ? 1 : 0,
                state.remaining,
                p.retryAfterMs,
                state.resetMs,
                0,
                0,
                0,
                0,
              ]);
            });
          }
        },
      ),
      { numRuns: 150 },
    );
  });
});
