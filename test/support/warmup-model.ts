/**
 * The reference of the token bucket's warm-up ramp (the four algorithms' models live in
 * src/features/rate-limit/algorithms/algorithms.ts, where the isolate's local buckets use them too; warm-up is only
 * checked against the script, as local buckets approximate it by the plain token bucket).
 */
/**
 * Token bucket warm-up: the refill rate climbs from rate/3 to rate over W (µs since the cold
 * start), rate(τ) = rate·(1/3 + 2/3·τ/W), then stays at rate. The tokens it refills over
 * [a, b] (µs since the cold start): its integral, rate·(b − a)/period at full speed.
 */
export function warmupTokens(l: { rate: number; periodUs: number; warmupUs: number }, a: number, b: number): number {
  const W = l.warmupUs;
  const perUs = l.rate / l.periodUs;
  const ramp = (x: number) => x / 3 + (x * x) / (3 * W); // ∫0^x (1/3 + 2/3·τ/W) dτ
  const ca = Math.min(a, W);
  const cb = Math.min(b, W);
  return perUs * (ramp(cb) - ramp(ca) + Math.max(0, b - Math.max(a, W)));
}
