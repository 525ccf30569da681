import { TokenBucket, type AlgoOutcome } from "../../src/features/rate-limit/algorithms/algorithms.js";

/**
 * The token bucket's reference model (GCRA in exact BigInt arithmetic, src/features/rate-limit/algorithms/algorithms.ts)
 * with the cost fixed per limit, as decide-lua.test.ts plays it. Times in microseconds.
 */
export interface ModelLimit {
  rate: number;
  periodUs: number;
  burst: number;
  cost: number;
}

export class TokenBucketModel {
  private readonly bucket: TokenBucket;

  constructor(private readonly l: ModelLimit) {
    this.bucket = new TokenBucket({ rate: l.rate, periodUs: l.periodUs, burst: l.burst });
  }

  /** What this bucket says about a request at time `t` (µs). */
  peek(t: number): AlgoOutcome {
    return this.bucket.peek(t, this.l.cost);
  }
}

/** What the debt model says about a request: whether it passes, whole tokens left (never below 0), the honest wait, and the time until full. */
export interface DebtOutcome {
  allowed: boolean;
  remaining: number;
  retryAfterMs: number;
  resetMs: number;
}

/**
 * The token bucket with cost from the response (docs/algorithms.md, Cost from the response), as GCRA in exact
 * BigInt arithmetic, everything × rate: the bucket is full when tat ≤ now, holds
 * (burst·P − (tat − now)) / P tokens, and a settle moves tat by delta tokens (back no further than
 * now: the bucket never holds more than burst). Past burst·P the bucket is in debt: it refuses
 * until the refill pays the debt back. Times in µs.
 */
export class DebtTokenBucketModel {
  private tat = 0n;

  constructor(private readonly l: Omit<ModelLimit, "cost">) {}

  /** A request of `cost` at `t`; charged when `take` and it passes. */
  request(t: number, cost: number, take: boolean): DebtOutcome {
    const { rate, P, full, now } = this.figures(t);
    const start = this.tat > now ? this.tat : now;
    const next = start + BigInt(cost) * P;
    const allowed = next - now <= full;
    if (allowed && take) this.tat = next;
    const after = allowed && take ? next : start;
    const left = full - (after - now);
    return {
      allowed,
      remaining: left <= 0n ? 0 : Number(left / P),
      retryAfterMs: allowed ? 0 : this.toMs(next - now - full, rate),
      resetMs: this.toMs(after - now, rate),
    };
  }

  /** Settles `delta` whole tokens at `t` (> 0 charges more, < 0 gives back); never refused. */
  settle(t: number, delta: number): void {
    const { P, now } = this.figures(t);
    const start = this.tat > now ? this.tat : now;
    const next = start + BigInt(delta) * P;
    this.tat = next > now ? next : now;
  }

  /** Whether the bucket is below zero tokens at `t`. */
  inDebt(t: number): boolean {
    const { full, now } = this.figures(t);
    return this.tat - now > full;
  }

  private figures(t: number) {
    const rate = BigInt(this.l.rate);
    const P = BigInt(this.l.periodUs);
    return { rate, P, full: BigInt(this.l.burst) * P, now: BigInt(t) * rate };
  }

  private toMs(scaled: bigint, rate: bigint): number {
    const us = (scaled + rate - 1n) / rate;
    return Number((us + 999n) / 1000n);
  }
}
