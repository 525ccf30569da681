import { compileLimits } from "../../../../test/support/limits.js";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Limit } from "../../../config/index.js";
import { LocalBuckets, type LocalBucket } from "./local.js";
import type { LimitOutcome } from "../types.js";

/*
 * The isolate's own buckets (on_store_error = "local"). Their arithmetic is the one the script is
 * checked against (src/features/rate-limit/algorithms/algorithms.ts, in test/integration/algorithms-lua.test.ts); here the
 * token bucket and the fixed window are also played against naive models of their own (a token
 * count, a log of admissions), and every algorithm against the properties a limit must keep:
 * honest retry-afters, all or nothing across limits, peeks that charge nothing, bounded memory.
 */

const compile = compileLimits;

const bucketsOf = (limits: Limit[], client = "c", costs: number[] = []): LocalBucket[] =>
  limits.map((limit, i) => ({
    limit,
    key: `sluice:r:${limit.name}:${client}`,
    params: { rate: limit.rate, period: limit.period, burst: limit.burst, cost: costs[i] ?? limit.cost },
  }));

const only = (o: LimitOutcome[]): LimitOutcome => o[0] as LimitOutcome;

const T0 = 1_700_000_000_000; // ms, an isolate's Date.now()
const PERIODS = ["1ms", "7ms", "500ms", "1s", "1m", "1h"] as const;

/** A token count scaled by the period (µs): the textbook bucket, not the GCRA of src/features/rate-limit/algorithms/algorithms.ts. */
class CountedTokens {
  private scaled: bigint;
  private last: bigint | undefined;
  constructor(private readonly l: { rate: number; periodUs: number; burst: number }) {
    this.scaled = BigInt(l.burst) * BigInt(l.periodUs);
  }

  take(ms: number, cost: number): { allowed: boolean; remaining: number; retryAfterMs: number; resetMs: number } {
    const t = BigInt(ms) * 1000n;
    const P = BigInt(this.l.periodUs);
    const rate = BigInt(this.l.rate);
    const cap = BigInt(this.l.burst) * P;
    if (this.last !== undefined && t > this.last) this.scaled += rate * (t - this.last);
    if (this.scaled > cap) this.scaled = cap;
    this.last = this.last === undefined || t > this.last ? t : this.last;
    const need = BigInt(cost) * P;
    const allowed = this.scaled >= need;
    if (allowed) this.scaled -= need;
    const ceil = (a: bigint, b: bigint) => (a <= 0n ? 0n : (a + b - 1n) / b);
    const toMs = (scaledUs: bigint) => Number(ceil(ceil(scaledUs, rate), 1000n));
    return {
      allowed,
      remaining: Number(this.scaled / P),
      retryAfterMs: allowed ? 0 : toMs(need - this.scaled),
      resetMs: toMs(cap - this.scaled),
    };
  }
}

/** Admissions written down one by one and counted per aligned window: no counter kept. */
class AdmissionLog {
  private readonly admitted: Array<{ ms: number; cost: number }> = [];
  constructor(private readonly l: { rate: number; periodMs: number }) {}

  take(ms: number, cost: number): { allowed: boolean; remaining: number } {
    const w = Math.floor(ms / this.l.periodMs);
    const used = this.admitted.filter((a) => Math.floor(a.ms / this.l.periodMs) === w).reduce((s, a) => s + a.cost, 0);
    const allowed = used + cost <= this.l.rate;
    if (allowed) this.admitted.push({ ms, cost });
    return { allowed, remaining: this.l.rate - used - (allowed ? cost : 0) };
  }
}

const arrivals = fc.array(
  fc.record({
    gap: fc.double({ min: 0, max: 1, noNaN: true }),
    cost: fc.double({ min: 0, max: 1, noNaN: true }),
    kind: fc.constantFrom(0, 1, 1, 2),
  }),
  { minLength: 1, maxLength: 60 },
);
/** Gaps (ms): none, up to 1.5 emission intervals (faster than the rate on average), up to 1.5 periods. */
const gapOf = (a: { gap: number; kind: number }, l: Limit) =>
  a.kind === 0 ? 0 : Math.floor(a.gap * 1.5 * (a.kind === 1 ? l.period / l.rate : l.period));
const costOf = (a: { cost: number }, capacity: number) => Math.min(capacity, 1 + Math.floor(a.cost ** 3 * capacity));

const tokenDef = fc.record({
  algorithm: fc.constant("token_bucket"),
  rate: fc.integer({ min: 1, max: 50 }),
  period: fc.constantFrom(...PERIODS),
  burst: fc.integer({ min: 1, max: 30 }),
});
const leakyDef = fc.record(
  {
    algorithm: fc.constant("leaky_bucket"),
    rate: fc.integer({ min: 1, max: 50 }),
    period: fc.constantFrom(...PERIODS),
    burst: fc.integer({ min: 1, max: 30 }),
    max_delay: fc.constantFrom("1ms", "300ms", "1s", "1h"),
    nodelay: fc.boolean(),
  },
  { requiredKeys: ["algorithm", "rate", "period", "burst"] },
);
const windowDef = (algorithm: string) =>
  fc.record({
    algorithm: fc.constant(algorithm),
    rate: fc.integer({ min: 1, max: 30 }),
    period: fc.constantFrom(...PERIODS),
  });
const anyDef = fc.oneof(tokenDef, leakyDef, windowDef("fixed_window"), windowDef("sliding_window"));

/** What a naive model says of a request: the verdict and the outcome figures it models. */
type NaiveSays = Pick<LimitOutcome, "allowed"> & Partial<Pick<LimitOutcome, "remaining" | "retryAfterMs" | "resetMs">>;

/** Plays random arrivals on one limit against the local buckets and a naive model of it: every figure the model gives must match. */
function playAgainst(
  def: fc.Arbitrary<Record<string, unknown>>,
  naiveOf: (l: Limit) => { take(ms: number, cost: number): NaiveSays },
): void {
  let refused = 0;
  fc.assert(
    fc.property(def, arrivals, (d, list) => {
      const [limit] = compile([d]) as [Limit];
      const local = new LocalBuckets();
      const naive = naiveOf(limit);
      let now = T0;
      for (const a of list) {
        now += gapOf(a, limit);
        const cost = costOf(a, limit.burst);
        const got = only(local.decide(bucketsOf([limit], "c", [cost]), now).outcomes);
        const want = naive.take(now, cost);
        expect(Object.fromEntries(Object.keys(want).map((k) => [k, got[k as keyof NaiveSays]]))).toEqual(want);
        if (!want.allowed) refused++;
      }
    }),
    { numRuns: 300 },
  );
  expect(refused).toBeGreaterThan(100);
}

describe("local buckets against naive models", () => {
  it("token bucket: every verdict, remaining, retry-after and reset match a plain token count", () => {
    playAgainst(tokenDef, (l) => new CountedTokens({ rate: l.rate, periodUs: l.period * 1000, burst: l.burst }));
  });

  it("fixed window: every verdict and remaining match a log of admissions", () => {
    playAgainst(windowDef("fixed_window"), (l) => new AdmissionLog({ rate: l.rate, periodMs: l.period }));
  });
});

describe("local buckets keep what a limit promises", () => {
  it("a refused request passes at exactly now + retry-after when nothing else arrives, and not a ms sooner (every algorithm)", () => {
    let probed = 0;
    fc.assert(
      fc.property(anyDef, arrivals, (def, list) => {
        const [limit] = compile([def]) as [Limit];
        const local = new LocalBuckets();
        let now = T0;
        for (const a of list) {
          now += gapOf(a, limit);
          const buckets = bucketsOf([limit], "c", [costOf(a, limit.burst)]);
          const d = local.decide(buckets, now);
          if (d.verdict !== "reject") continue;
          const retry = d.blocking.retryAfterMs;
          expect(retry).toBeGreaterThanOrEqual(0);
          probed++;
          // peeks charge nothing: the run goes on as if they had not been made
          expect(local.decide(buckets, now + retry, "peek").verdict).not.toBe("reject");
          if (retry >= 1) expect(local.decide(buckets, now + retry - 1, "peek").verdict).toBe("reject");
        }
      }),
      { numRuns: 300 },
    );
    expect(probed).toBeGreaterThan(100);
  });

  it("all or nothing across a route's limits: a refused request changes no bucket; a shadow limit never refuses", () => {
    let spared = 0;
    let shadowed = 0;
    fc.assert(
      fc.property(fc.array(fc.tuple(anyDef, fc.boolean()), { minLength: 2, maxLength: 4 }), arrivals, (defs, list) => {
        const limits = compile(defs.map(([d, shadow]) => ({ ...d, shadow })));
        const local = new LocalBuckets();
        let now = T0;
        for (const a of list) {
          now += gapOf(a, limits[0] as Limit);
          const buckets = bucketsOf(limits);
          const before = local.decide(buckets, now, "peek");
          const d = local.decide(buckets, now);
          const enforcedRefusal = d.outcomes.some((o) => !o.allowed && !o.limit.shadow);
          expect(d.verdict === "reject").toBe(enforcedRefusal);
          if (d.verdict === "reject") {
            // nothing taken: the same instant looks exactly as before
            expect(local.decide(buckets, now, "peek").outcomes.map((o) => o.remaining)).toEqual(
              before.outcomes.map((o) => o.remaining),
            );
            if (d.outcomes.some((o) => o.allowed)) spared++;
          } else if (d.verdict === "shadow") shadowed++;
        }
      }),
      { numRuns: 200 },
    );
    expect(Math.min(spared, shadowed)).toBeGreaterThan(20);
  });

  it("a client at 80/s against 10/s with a burst of 20 gets burst + rate × duration in 3 s, and an honest Retry-After", () => {
    const [limit] = compile([{ rate: 10, period: "1s", burst: 20 }]) as [Limit];
    const local = new LocalBuckets();
    let admitted = 0;
    let last: LimitOutcome | undefined;
    for (let i = 0; i < 240; i++) {
      const d = local.decide(bucketsOf([limit]), T0 + Math.floor(i * 12.5));
      if (d.verdict === "reject") last = d.blocking;
      else admitted++;
    }
    // 20 at once, then one per 100 ms over the 2 987 ms that follow
    expect(admitted).toBe(20 + 29);
    expect(last?.retryAfterMs).toBeGreaterThan(0);
    expect(last?.retryAfterMs).toBeLessThanOrEqual(100);
  });

  it("peek answers from local state and charges nothing", () => {
    const [limit] = compile([{ rate: 1, period: "1m", burst: 2 }]) as [Limit];
    const local = new LocalBuckets();
    for (let i = 0; i < 5; i++) expect(only(local.decide(bucketsOf([limit]), T0, "peek").outcomes).remaining).toBe(2);
    expect(local.size).toBe(0);
    local.decide(bucketsOf([limit]), T0);
    expect(only(local.decide(bucketsOf([limit]), T0, "peek").outcomes).remaining).toBe(1);
  });

  it("a tier's figures get a bucket of their own: changing tier never resets the one emptied", () => {
    const [limit] = compile([{ rate: 2, period: "1m", tier: "header:x-plan", rates: { gold: "5/1m" } }]) as [Limit];
    const local = new LocalBuckets();
    const asTier = (rate: number): LocalBucket[] => [
      { limit, key: "sluice:r:l0:c", params: { rate, period: 60_000, burst: rate, cost: 1 } },
    ];
    const admitted = (rate: number, n: number) =>
      Array.from({ length: n }, () => local.decide(asTier(rate), T0).verdict).filter((v) => v !== "reject").length;
    expect(admitted(2, 4)).toBe(2);
    expect(admitted(5, 8)).toBe(5);
    expect(admitted(2, 4)).toBe(0); // back on the small tier: still empty
  });
});

describe("local buckets are bounded", () => {
  const [limit] = compile([{ rate: 1, period: "1m", burst: 1 }]) as [Limit];
  const take = (local: LocalBuckets, client: string, now: number) =>
    local.decide(bucketsOf([limit], client), now).verdict;

  it("past capacity the least recently used bucket goes (and starts full again)", () => {
    const local = new LocalBuckets(3, 1_000);
    for (const c of ["a", "b", "c"]) expect(take(local, c, T0)).toBe("allow");
    expect(take(local, "a", T0)).toBe("reject"); // a is in use again: b is now the least recently used
    expect(take(local, "d", T0)).toBe("allow");
    expect(local.size).toBe(3);
    expect(take(local, "a", T0)).toBe("reject");
    expect(take(local, "c", T0)).toBe("reject");
    expect(take(local, "b", T0)).toBe("allow"); // forgotten, so full again
  });

  it("buckets back to their initial state go before live ones, even more recently used ones", () => {
    const [fast] = compile([{ name: "fast", rate: 1, period: "1s", burst: 1 }]) as [Limit];
    const local = new LocalBuckets(3, 1_000);
    expect(take(local, "a", T0)).toBe("allow"); // live for a minute, and the least recently used
    expect(local.decide(bucketsOf([fast], "idle"), T0).verdict).toBe("allow"); // back to full 1 s later
    expect(take(local, "b", T0)).toBe("allow");
    expect(take(local, "d", T0 + 2_000)).toBe("allow");
    // the idle bucket went, not a: a and b are still empty
    expect(take(local, "a", T0 + 2_000)).toBe("reject");
    expect(take(local, "b", T0 + 2_000)).toBe("reject");
    // with only live buckets left, the least recently used goes: d
    expect(take(local, "e", T0 + 2_000)).toBe("allow");
    expect(take(local, "d", T0 + 2_000)).toBe("allow");
  });

  it("stays at capacity under a flood of distinct clients", () => {
    const local = new LocalBuckets(100, 1_000);
    for (let i = 0; i < 1_000; i++) take(local, `c${i}`, T0 + i);
    expect(local.size).toBe(100);
  });
});
