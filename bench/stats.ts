/** Small number helpers shared by the benchmarks. */

export interface Summary {
  count: number;
  median_ms: number;
  p90_ms: number;
  p99_ms: number;
  mean_ms: number;
  min_ms: number;
  max_ms: number;
}

/** Nearest-rank percentile of an ascending array (p in 0..100). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))] as number;
}

export function summarise(samplesMs: readonly number[]): Summary {
  const sorted = [...samplesMs].sort((a, b) => a - b);
  const sum = sorted.reduce((a, b) => a + b, 0);
  return {
    count: sorted.length,
    median_ms: round(percentile(sorted, 50)),
    p90_ms: round(percentile(sorted, 90)),
    p99_ms: round(percentile(sorted, 99)),
    mean_ms: round(sorted.length === 0 ? Number.NaN : sum / sorted.length),
    min_ms: round(sorted[0] ?? Number.NaN),
    max_ms: round(sorted[sorted.length - 1] ?? Number.NaN),
  };
}

/** Rounds to `digits` decimals (3 by default: microseconds when the unit is ms). */
export function round(value: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** Milliseconds elapsed since a `process.hrtime.bigint()` reading. */
export function msSince(start: bigint): number {
  return Number(process.hrtime.bigint() - start) / 1e6;
}

/**
 * Distinct client addresses from 198.18.0.0/15 (RFC 2544, reserved for benchmarks), so every
 * request can come from an IP no earlier request used: 131,072 of them per run.
 */
export class IpSource {
  private next = 1;

  take(): string {
    const i = this.next++;
    if (i >= 1 << 17) throw new Error("IpSource exhausted: more than 131071 distinct client IPs requested");
    return `198.${18 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
  }
}
