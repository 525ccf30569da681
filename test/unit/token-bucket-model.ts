import { TokenBucket, type AlgoOutcome } from "../../src/limiter/algorithms.js";

/**
 * The token bucket's reference model (GCRA in exact BigInt arithmetic, src/limiter/algorithms.ts)
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
    this.bucket = new TokenBucket({ algorithm: "token_bucket", rate: l.rate, periodUs: l.periodUs, burst: l.burst });
  }

  /** What this bucket says about a request at time `t` (µs). */
  peek(t: number): AlgoOutcome {
    return this.bucket.peek(t, this.l.cost);
  }
}
