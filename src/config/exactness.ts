import { algorithm, type Algorithm, type ExactnessProblem } from "../features/rate-limit/algorithms/registry.js";

export type { ExactnessProblem };

/** The figures decide.lua counts a bucket with: a configured limit's, a tier's, or an override's. */
export interface BucketFigures {
  algorithm: Algorithm;
  rate: number;
  /** Capacity; windows ignore it (they hold `rate`), a tier's is its rate. */
  burst: number;
  periodMs: number;
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
 * - then the algorithm's own rule (its `exactness` in src/features/rate-limit/algorithms/registry.ts): the buckets' capacity
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

/** The longest a timer waits: setTimeout takes a 32-bit signed count of ms, and fires at once past it. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Whether a leaky bucket's `max_delay` fits a timer (the request waits out its delay with one), or what is wrong. */
export function maxDelayProblem(maxDelayMs: number): string | undefined {
  if (maxDelayMs <= MAX_TIMER_MS) return undefined;
  return `${maxDelayMs} ms is longer than a timer can wait: at most ${MAX_TIMER_MS} ms (about 24.8 days)`;
}

/**
 * Whether decide.lua can settle a cost from the response exactly, or what is wrong: a settle
 * takes up to `max` tokens, in the bucket's units (period_us / gcd(period_us, rate)), so
 * max × unit must be exact, like the capacity (and within `%d`'s 2^63, which that implies).
 */
export function responseMaxProblem(max: number, f: { rate: number; periodMs: number }): string | undefined {
  const periodUs = f.periodMs * 1000;
  if (max * (periodUs / gcd(periodUs, f.rate)) <= Number.MAX_SAFE_INTEGER) return undefined;
  return `max ${max} at rate ${f.rate} per ${f.periodMs} ms is too large to count exactly; use a smaller max, a shorter period or a rate that divides it`;
}

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}
