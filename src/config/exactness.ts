import type { LimitSettings } from "./schema.js";

/** The figures decide.lua counts a bucket with: a configured limit's, a tier's, or an override's. */
export interface BucketFigures {
  algorithm: LimitSettings["algorithm"];
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

const MAX_EXACT = Number.MAX_SAFE_INTEGER;
/** decide.lua takes the period in µs; beyond this (about 285 years) it is no longer an exact double. */
const MAX_PERIOD_MS = Math.floor(MAX_EXACT / 1000);

/**
 * Whether decide.lua can count a bucket with these figures exactly, in Lua's doubles, or what is
 * wrong. Past Number.MAX_SAFE_INTEGER the arithmetic rounds, and a value too large for
 * `string.format('%d')` is stored garbled and read back as a full bucket: a limit that never refuses.
 *
 * - every algorithm: the period in µs must be exact (token and leaky buckets take its gcd with the
 *   rate, windows divide Redis time by it);
 * - token_bucket, leaky_bucket: tokens are counted in units of period_us / gcd(period_us, rate),
 *   so the capacity in units, burst × that, must be exact (a request's cost is at most the burst);
 * - sliding_window: the decision compares prev × (P − elapsed) + (curr + cost) × P with rate × P
 *   (P the period in ms), so rate × P must be exact; fixed_window counts only up to rate, but keeps
 *   the same rule so a limit can move between the two window algorithms.
 *
 * Pure: the configuration (limits and tier rates) and the admin API's overrides both ask it.
 *
 * @example exactnessProblem({ algorithm: "token_bucket", rate: 1000, burst: 1000, periodMs: 86_400_000 }) // undefined
 */
export function exactnessProblem(f: BucketFigures): ExactnessProblem | undefined {
  if (f.periodMs > MAX_PERIOD_MS) {
    return { field: "period", message: `period ${f.periodMs} ms is too long to count exactly: at most ${MAX_PERIOD_MS} ms (about 285 years)` };
  }
  if (f.algorithm === "fixed_window" || f.algorithm === "sliding_window") {
    if (f.rate * f.periodMs > MAX_EXACT) {
      return { field: "rate", message: `rate ${f.rate} × period ${f.periodMs} ms is too large to count exactly; use a smaller rate or a shorter period` };
    }
    return undefined;
  }
  const periodUs = f.periodMs * 1000;
  if (f.burst * (periodUs / gcd(periodUs, f.rate)) > MAX_EXACT) {
    return { field: "burst", message: `burst ${f.burst} at rate ${f.rate} per ${f.periodMs} ms is too large to count exactly; use a shorter period or a rate that divides it` };
  }
  return undefined;
}

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}
