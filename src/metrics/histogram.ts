/*
 * The latency histogram, shared by the adaptive limit's reports to lua/adaptive.lua and the
 * metrics' latency figures (round trips, first arrivals): four buckets per doubling, so a
 * percentile read from it is at most 19% (2^(1/4)) above the true one, whatever the scale, and a
 * report is a few dozen numbers however many responses it covers. Bucket 0 holds 1 ms or less;
 * bucket i > 0 holds (2^((i−1)/4), 2^(i/4)] ms; the last one everything longer.
 */

/** The last bucket: 2^(95/4) ms is about 3.8 hours. */
export const LAST_BUCKET = 95;

/** The bucket a latency (ms) falls in. */
export function latencyBucket(ms: number): number {
  if (!(ms > 1)) return 0;
  return Math.min(LAST_BUCKET, Math.ceil(4 * Math.log2(ms)));
}

/** The upper bound (ms) of bucket `i`: what the script reports as a percentile falling in it. */
export function bucketBound(i: number): number {
  return 2 ** (i / 4);
}

/** "i:count,…" as adaptive.lua reads it. */
export function serialiseHistogram(counts: ReadonlyMap<number, number>): string {
  return [...counts].map(([i, n]) => `${i}:${n}`).join(",");
}

/** The percentiles a route may follow, as fractions. */
export const QUANTILES = { p50: 0.5, p75: 0.75, p90: 0.9, p95: 0.95, p99: 0.99 } as const;

export type Percentile = keyof typeof QUANTILES;
