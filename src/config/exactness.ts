import { algorithm, type Algorithm } from "../limiter/registry.js";

/** The figures decide.lua counts a bucket with: a configured limit's, a tier's, or an override's. */
export interface BucketFigures {
  algorithm: Algorithm;
  rate: number;
  /** Capacity; windows ignore it (they hold `rate`), a tier's is its rate. */
  burst: number;
  periodMs: number;
}

/** Which of the figures is at fault, so the caller can name its own field. */
export interface ExactnessProblem {
  field: "rate" | "burst" | "period";
  message: string;
}

/** decide.lua takes the period in µs; beyond this (about 285 years) it is no longer an exact double. */
const MAX_PERIOD_MS = Math.floor(Number.MAX_SAFE_INTEGER / 1000);

/**
 * Whether decide.lua can count a bucket with these figures exactly, in Lua's doubles, or what is
 * wrong. Past Number.MAX_SAFE_INTEGER the arithmetic rounds, and a value too large for
 * `string.format('%d')` is stored garbled and read back as a full bucket: a limit that never refuses.
 *
 * - every algorithm: the period in µs must be exact (token and leaky buckets take its gcd with the
 *   rate, windows divide Redis time by it);
 * - then the algorithm's own rule (its `exactness` in src/limiter/registry.ts): the buckets' capacity
 *   in units, the windows' rate × period.
 *
 * Pure: the configuration (limits and tier rates) and the admin API's overrides both ask it.
 *
 * @example exactnessProblem({ algorithm: "token_bucket", rate: 1000, burst: 1000, periodMs: 86_400_000 }) // undefined
 */
export function exactnessProblem(f: BucketFigures): ExactnessProblem | undefined {
  if (f.periodMs > MAX_PERIOD_MS) {
    return {
      field: "period",
      message: `period ${f.periodMs} ms is too long to count exactly: at most ${MAX_PERIOD_MS} ms (about 285 years)`,
    };
  }
  return algorithm(f.algorithm).exactness(f);
}
