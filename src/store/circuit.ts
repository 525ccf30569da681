/**
 * A circuit per store, per isolate: after a few consecutive failures (timeouts, or the store
 * unreachable) the store is skipped for a short time, so requests stop waiting out a budget
 * each on a store that is not answering. Then one call goes through as a probe; its success
 * closes the circuit, its failure opens it again, for longer.
 *
 * The open time is short on purpose: sluice must be back on Redis within a second of it
 * returning, so the longest open time plus a probe's round trip stays under a second. A
 * probe costs one request per open period per isolate: cheap next to the traffic it spares.
 */

export interface CircuitSettings {
  /** Consecutive failures that open the circuit. */
  threshold: number;
  /** The first open period (ms); each failed probe doubles it, up to `maxOpenMs`. */
  openMs: number;
  maxOpenMs: number;
  /** A probe not reported for this long is presumed lost, and another may go (a safety net: callers always report). */
  probeLostMs: number;
}

export const STORE_CIRCUIT: CircuitSettings = { threshold: 3, openMs: 250, maxOpenMs: 750, probeLostMs: 15_000 };

/** What a call may do: go as usual, go as the one probe of an open circuit, or not go at all. */
export type Admission = "pass" | "probe" | "refuse";

export class StoreCircuit {
  private failures = 0;
  /** While open: when the next probe may go. 0 while closed. */
  private openUntil = 0;
  private openedForMs = 0;
  /** When the probe in flight went, if one is. */
  private probeSince: number | undefined;

  constructor(private readonly settings: CircuitSettings = STORE_CIRCUIT) {}

  admit(now: number): Admission {
    if (this.openUntil === 0) return "pass";
    if (now < this.openUntil) return "refuse";
    if (this.probeSince !== undefined && now - this.probeSince < this.settings.probeLostMs) return "refuse";
    this.probeSince = now;
    return "probe";
  }

  /** The store answered (any call, probe or not): it is there, the circuit closes. */
  succeeded(): void {
    this.failures = 0;
    this.openUntil = 0;
    this.openedForMs = 0;
    this.probeSince = undefined;
  }

  /**
   * A call timed out or could not reach the store. While open, only the probe's failure counts
   * (calls that were already in flight when it opened fail too, and must not stretch it).
   */
  failed(now: number, wasProbe: boolean): void {
    if (this.openUntil === 0) {
      this.failures++;
      if (this.failures >= this.settings.threshold) this.open(now, this.settings.openMs);
    } else if (wasProbe) {
      this.open(now, Math.min(2 * this.openedForMs, this.settings.maxOpenMs));
    }
  }

  /** closed; open (no call goes); half-open (the open time is over: one probe goes, the others wait for its outcome). */
  state(now: number): "closed" | "open" | "half_open" {
    if (this.openUntil === 0) return "closed";
    return now < this.openUntil ? "open" : "half_open";
  }

  /** Until when the circuit is open (ms), or 0 while closed. */
  get openUntilMs(): number {
    return this.openUntil;
  }

  private open(now: number, forMs: number): void {
    this.openedForMs = forMs;
    this.openUntil = now + forMs;
    this.probeSince = undefined;
  }
}
