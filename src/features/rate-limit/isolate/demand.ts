/**
 * Tokens admitted per second, from two one-second windows (isolate clock), the older weighted by
 * how much of it the last second still covers; 0 until the bucket has been in use for a second.
 * A bucket seen for less than that may be one burst, which Redis decides best: its requests are
 * on their way there already, and a lease granted among them comes back after the last one and
 * sits unused. (An idle window starts the second again.)
 */
export class Demand {
  private window = 0;
  private prev = 0;
  private curr = 0;
  /** When the bucket's current run of use began (ms), undefined before its first admission. */
  private since: number | undefined;

  add(now: number, tokens: number): void {
    this.roll(now);
    this.since ??= now;
    this.curr += tokens;
  }

  perSecond(now: number): number {
    this.roll(now);
    if (this.since === undefined || now - this.since < 1000) return 0;
    const elapsed = now - this.window * 1000;
    return (this.prev * (1000 - elapsed)) / 1000 + this.curr;
  }

  private roll(now: number): void {
    const w = Math.floor(now / 1000);
    if (w === this.window) return;
    const idle = w !== this.window + 1 || this.curr === 0;
    this.prev = idle ? 0 : this.curr;
    if (idle) this.since = undefined;
    this.curr = 0;
    this.window = w;
  }
}
