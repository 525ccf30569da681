import type { Limit } from "../../config/index.js";
import type { Share } from "../../region/shares.js";
import type { Store } from "../../store/redis.js";

/** What one limit said about one request; the same shape whatever the algorithm. */
export interface LimitOutcome {
  limit: Limit;
  /** The Redis key of the bucket. */
  key: string;
  /** What this request cost (the limit's cost, or the request's own from a cost header). */
  cost: number;
  allowed: boolean;
  /** Whole tokens left (after this request's charge when it was admitted), less the floor its priority must leave (docs/algorithms.md, Priorities). */
  remaining: number;
  /** When refused: milliseconds until the request could pass (-1: never). */
  retryAfterMs: number;
  /** Milliseconds until the bucket is full again. */
  resetMs: number;
  /** leaky_bucket: how long the request must wait for its slot before it is forwarded. */
  delayMs: number;
  /** concurrency: the in-flight slot the request asked for; it holds it when `allowed` in an admitted take. */
  slot?: string;
}

/**
 * The verdict on a request. `shadow` is an admitted request that a shadow limit would have
 * refused. `cached` marks a refusal answered from the blocked-bucket cache, without Redis;
 * `leased` an admission made from the isolate's leases, without Redis (its `remaining` figures
 * are the leases' tokens, a lower bound of the buckets').
 */
export type Decision =
  | { verdict: "allow" | "shadow"; outcomes: LimitOutcome[]; leased?: true }
  | { verdict: "reject"; outcomes: LimitOutcome[]; blocking: LimitOutcome; cached: boolean };

/** The figures one request is decided with: the limit's, or its tier's, and the request's cost. */
export interface BucketParams {
  rate: number;
  /** ms */
  period: number;
  burst: number;
  cost: number;
  /**
   * Whole tokens (requests, queue places, slots) the request must leave in the bucket: the
   * capacity kept for priorities above the request's (docs/algorithms.md, Priorities); 0 or absent for none.
   */
  floor?: number;
}

/** One bucket a request falls into, and the Redis that holds it. */
export interface Bucket {
  limit: Limit;
  key: string;
  store: Store;
  /** Defaults to the limit's own rate, period, burst and cost. */
  params?: BucketParams;
  /** `split` limits: where this region's share and demand are kept, and the share to use before the first rebalance. */
  split?: { shareKey: string; demandKey: string; start: Share };
  /** concurrency limits: the id of the in-flight slot this request takes (one per request and limit). */
  slot?: string;
  /** sliding_log limits: the id of this request's entries in the log (a refund removes them). */
  entry?: string;
  /** "settle" calls (cost from the response): whole tokens to charge on top of the reserve taken (< 0: given back). */
  delta?: number;
}
