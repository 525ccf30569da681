/**
 * Buckets known to refuse until a given time, kept in isolate memory so that a client hammering
 * a closed bucket costs at most one Redis call a second per isolate. Bounded: past `capacity` entries the oldest is dropped
 * (Map keeps insertion order), which only means one more Redis call for that bucket.
 */
export class BlockedBuckets {
  private readonly until = new Map<string, { until: number; recheck: number }>();

  /**
   * @param recheckMs how long a refusal is trusted before Redis is asked again, even when it lasts
   * longer: an operator's override or reset then takes effect within that time everywhere.
   */
  constructor(
    private readonly capacity = 10_000,
    private readonly recheckMs = 1_000,
  ) {}

  /** Milliseconds the bucket stays closed, or 0 when it is not known (or no longer trusted) to be. */
  remaining(key: string, now: number): number {
    const t = this.until.get(key);
    if (t === undefined) return 0;
    if (t.until <= now || t.recheck <= now) {
      this.until.delete(key);
      return 0;
    }
    return t.until - now;
  }

  block(key: string, until: number, now = Date.now()): void {
    this.until.delete(key);
    this.until.set(key, { until, recheck: Math.min(until, now + this.recheckMs) });
    if (this.until.size > this.capacity) this.until.delete(this.until.keys().next().value as string);
  }

  /**
   * Forgets every bucket of a route (`{prefix}:{route}:`): its overrides changed, so a refusal
   * decided on the old figures may no longer hold.
   */
  forgetRoute(routePrefix: string): void {
    for (const key of this.until.keys()) if (key.startsWith(routePrefix)) this.until.delete(key);
  }

  get size(): number {
    return this.until.size;
  }
}
