/**
 * Buckets known to refuse until a given time, kept in isolate memory so that a client hammering
 * a closed bucket costs no Redis call. Bounded: past `capacity` entries the oldest is dropped
 * (Map keeps insertion order), which only means one more Redis call for that bucket.
 */
export class BlockedBuckets {
  private readonly until = new Map<string, number>();

  constructor(private readonly capacity = 10_000) {}

  /** Milliseconds the bucket stays closed, or 0 when it is not known to be closed. */
  remaining(key: string, now: number): number {
    const t = this.until.get(key);
    if (t === undefined) return 0;
    if (t <= now) {
      this.until.delete(key);
      return 0;
    }
    return t - now;
  }

  block(key: string, until: number): void {
    this.until.delete(key);
    this.until.set(key, until);
    if (this.until.size > this.capacity) this.until.delete(this.until.keys().next().value as string);
  }

  get size(): number {
    return this.until.size;
  }
}
