import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { exactnessProblem, type BucketFigures } from "./exactness.js";
import { loadConfig } from "./index.js";

const MAX = BigInt(Number.MAX_SAFE_INTEGER);
const DAY_MS = 86_400_000;

/** What decide.lua needs, in exact integers: the period in µs, then each algorithm's largest figure. */
function countableExactly(f: BucketFigures): boolean {
  const periodUs = BigInt(f.periodMs) * 1000n;
  if (periodUs > MAX) return false;
  // a log keeps a member per admitted unit of the period: at most 10,000
  if (f.algorithm === "sliding_log") return f.rate <= 10_000 && BigInt(f.rate) * BigInt(f.periodMs) <= MAX;
  if (f.algorithm === "fixed_window" || f.algorithm === "sliding_window")
    return BigInt(f.rate) * BigInt(f.periodMs) <= MAX;
  const unit = periodUs / gcd(periodUs, BigInt(f.rate));
  return BigInt(f.burst) * unit <= MAX;
}

function gcd(a: bigint, b: bigint): bigint {
  while (b) [a, b] = [b, a % b];
  return a;
}

const ALGORITHMS = ["token_bucket", "leaky_bucket", "fixed_window", "sliding_window", "sliding_log"] as const;

describe("exactnessProblem", () => {
  it("agrees with exact integer arithmetic for every figure a configuration or an override can hold", () => {
    const count = fc.oneof(
      fc.integer({ min: 1, max: 1_000 }),
      fc.integer({ min: 9_990, max: 10_010 }),
      fc.integer({ min: 1, max: 1_000_000_000 }),
    );
    // periods as parseDuration makes them: up to 999999999 of ms, s, m, h or d
    const periodMs = fc
      .tuple(
        fc.oneof(fc.integer({ min: 1, max: 1_000 }), fc.integer({ min: 1, max: 999_999_999 })),
        fc.constantFrom(1, 1_000, 60_000, 3_600_000, DAY_MS),
      )
      .map(([n, unit]) => n * unit);
    fc.assert(
      fc.property(fc.constantFrom(...ALGORITHMS), count, count, periodMs, (algorithm, rate, burst, ms) => {
        const figures = { algorithm, rate, burst, periodMs: ms };
        expect(exactnessProblem(figures) === undefined, JSON.stringify(figures)).toBe(countableExactly(figures));
      }),
      { numRuns: 5_000 },
    );
  });

  it("names the figure at fault", () => {
    // a tier of 1000 per 999999999 days: 8.64e19 µs, far past 2^53, which decide.lua stores garbled
    expect(
      exactnessProblem({ algorithm: "token_bucket", rate: 1000, burst: 1000, periodMs: 999_999_999 * DAY_MS })?.field,
    ).toBe("period");
    // 7 per 100000 days: a token is 8.64e15 units (7 is prime to the period), seven of them overflow
    expect(exactnessProblem({ algorithm: "leaky_bucket", rate: 7, burst: 7, periodMs: 100_000 * DAY_MS })?.field).toBe(
      "burst",
    );
    expect(
      exactnessProblem({ algorithm: "token_bucket", rate: 1000, burst: 7, periodMs: 100_000 * DAY_MS }),
    ).toBeUndefined(); // the rate divides it
    expect(
      exactnessProblem({
        algorithm: "sliding_window",
        rate: 1_000_000_000,
        burst: 1_000_000_000,
        periodMs: 200 * DAY_MS,
      })?.field,
    ).toBe("rate");
    expect(
      exactnessProblem({ algorithm: "fixed_window", rate: 1_000, burst: 1_000, periodMs: 200 * DAY_MS }),
    ).toBeUndefined();
    expect(exactnessProblem({ algorithm: "token_bucket", rate: 100, burst: 50, periodMs: 1_000 })).toBeUndefined();
  });
});

describe("the configuration checks tier rates like the limit's own", () => {
  const ORIGIN_URL = "https://api.example.com";
  const tiered = (rates: Record<string, string>, algorithm = "token_bucket") => ({
    ORIGIN_URL,
    SLUICE: {
      routes: [
        {
          name: "r",
          match: "/api/*",
          limits: [
            { name: "per-user", key: "header:x-user", algorithm, rate: 10, period: "1s", tier: "header:x-plan", rates },
          ],
        },
      ],
    },
  });
  const errorOf = (vars: { ORIGIN_URL: string; SLUICE: unknown }) => {
    const r = loadConfig(vars);
    return r.ok ? undefined : r.error;
  };

  it("refuses a tier rate decide.lua cannot count exactly, naming the tier", () => {
    const e = errorOf(tiered({ pro: "100/1s", free: "1000/999999999d" }));
    expect(e?.field).toBe("SLUICE.routes[0].limits[0].rates.free");
    expect(e?.message).toMatch(
      /^SLUICE\.routes\[0\] \("r"\)\.limits\[0\] \("per-user"\)\.rates\.free: tier "free": .*exactly/,
    );
    expect(errorOf(tiered({ free: "7/100000d" }))?.field).toBe("SLUICE.routes[0].limits[0].rates.free");
    expect(errorOf(tiered({ bulk: "1000000000/200d" }, "sliding_window"))?.field).toBe(
      "SLUICE.routes[0].limits[0].rates.bulk",
    );
  });

  it("accepts tier rates that count exactly", () => {
    expect(errorOf(tiered({ free: "60/1m", pro: "1000/1d", bulk: "1000/100000d" }))).toBeUndefined();
  });

  it("names the limit's own field as before", () => {
    const own = (over: Record<string, unknown>) =>
      errorOf({
        ORIGIN_URL,
        SLUICE: { routes: [{ name: "r", match: "/a", limits: [{ name: "l", rate: 10, period: "1s", ...over }] }] },
      })?.field;
    expect(own({ rate: 7, period: "100000d" })).toBe("SLUICE.routes[0].limits[0].burst");
    expect(own({ algorithm: "sliding_window", rate: 1_000_000_000, period: "200d" })).toBe(
      "SLUICE.routes[0].limits[0].rate",
    );
    expect(own({ rate: 1_000_000_000, burst: 1, period: "999999999d" })).toBe("SLUICE.routes[0].limits[0].period");
  });
});

describe("figures past what sluice can count or wait for are refused at load, naming the field", () => {
  const limitError = (limit: Record<string, unknown>) => {
    const r = loadConfig({
      ORIGIN_URL: "https://origin.example",
      SLUICE: { routes: [{ name: "r", match: "/a", limits: [{ name: "l", key: "header:x-key", ...limit }] }] },
    });
    return r.ok ? undefined : r.error;
  };
  // 7 per 1000 days: a token is 86 400 000 000 000 units (the period in µs, which 7 does not divide)
  const slow = { rate: 7, period: "1000d" };
  const fromResponse = (max: number) => ({ response: "sse:usage.total_tokens", reserve: 1, max });

  it("cost.max whose settle, max × unit, passes 2^53", () => {
    const e = limitError({ ...slow, cost: fromResponse(1000) });
    expect(e?.field).toBe("SLUICE.routes[0].limits[0].cost.max");
    expect(e?.message).toMatch(/max 1000 .*exactly/);
    // 100 × 8.64e13 is under 2^53
    expect(limitError({ ...slow, cost: fromResponse(100) })).toBeUndefined();
  });

  it("cost.max checked at every tier's rate too", () => {
    const tiered = { rate: 10, period: "1s", tier: "header:x-plan", rates: { free: "7/1000d" } };
    expect(limitError({ ...tiered, cost: fromResponse(1000) })?.field).toBe("SLUICE.routes[0].limits[0].cost.max");
    expect(limitError({ ...tiered, cost: fromResponse(100) })).toBeUndefined();
  });

  it("a sliding_log rate above the 10,000 entries its log keeps, tier rates too", () => {
    const log = { algorithm: "sliding_log", period: "1m" };
    const e = limitError({ ...log, rate: 10_001 });
    expect(e?.field).toBe("SLUICE.routes[0].limits[0].rate");
    expect(e?.message).toMatch(/rate 10001 is more than a sliding_log keeps: at most 10000 per period/);
    expect(limitError({ ...log, rate: 10_000 })).toBeUndefined();
    const tiered = { ...log, rate: 10, tier: "header:x-plan", rates: { bulk: "20000/1m" } };
    expect(limitError(tiered)?.field).toBe("SLUICE.routes[0].limits[0].rates.bulk");
    expect(limitError({ ...tiered, rates: { bulk: "10000/1m" } })).toBeUndefined();
  });

  it("max_delay longer than a timer can wait (2^31 - 1 ms)", () => {
    const leaky = { algorithm: "leaky_bucket", rate: 10, period: "1s" };
    const e = limitError({ ...leaky, max_delay: "25d" });
    expect(e?.field).toBe("SLUICE.routes[0].limits[0].max_delay");
    expect(e?.message).toMatch(/2147483647 ms/);
    expect(limitError({ ...leaky, max_delay: "24d" })).toBeUndefined();
  });
});
