/**
 * The reference model of a token bucket: GCRA ("virtual scheduling") in exact BigInt
 * arithmetic. It is a different formulation from decide.lua's token counting, so agreement
 * between the two is evidence, not tautology. Times in microseconds; every quantity is scaled by
 * `rate` so that the emission interval period/rate never needs a fraction.
 */
export interface ModelLimit {
  rate: number;
  periodUs: number;
  burst: number;
  cost: number;
}

export interface ModelState {
  remaining: number;
  resetMs: number;
}

export interface ModelOutcome {
  allowed: boolean;
  retryAfterMs: number;
  /** The bucket as it stands at `t`, nothing charged. */
  before: ModelState;
  /** The bucket after this request's charge (equal to `before` when refused). */
  after: ModelState;
  /** Charge the request (only if allowed). */
  commit(): void;
}

export class TokenBucketModel {
  /** Theoretical arrival time × rate. 0: the bucket has always been full. */
  private tat = 0n;

  constructor(private readonly l: ModelLimit) {}

  /** What this bucket says about a request at time `t` (µs). */
  peek(t: number): ModelOutcome {
    const rate = BigInt(this.l.rate);
    const P = BigInt(this.l.periodUs);
    const full = BigInt(this.l.burst) * P;
    const now = BigInt(t) * rate;
    const start = this.tat > now ? this.tat : now;
    const next = start + BigInt(this.l.cost) * P;
    const allowed = next - now <= full;
    const ceilDiv = (a: bigint, b: bigint) => (a <= 0n ? 0n : (a + b - 1n) / b);
    const toMs = (scaled: bigint) => Number(ceilDiv(ceilDiv(scaled, rate), 1000n));
    // tokens × P = burst × P − (tat − now): the GCRA view of a token count
    const state = (tat: bigint): ModelState => ({ remaining: Number((full - (tat - now)) / P), resetMs: toMs(tat - now) });
    return {
      allowed,
      retryAfterMs: allowed ? 0 : toMs(next - now - full),
      before: state(start),
      after: state(allowed ? next : start),
      commit: () => {
        if (allowed) this.tat = next;
      },
    };
  }
}
