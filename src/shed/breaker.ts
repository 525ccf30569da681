/** A route's breaker settings (see the `breaker` table of a route). */
export interface BreakerSettings {
  window: number;
  min_requests: number;
  error_ratio: number;
  latency_ms?: number | undefined;
  cooldown: number;
  probes: number;
}

/** What the breaker lets a request do: go to the origin, go as a half-open probe, or be shed. */
export type Admission = { pass: true; probe: boolean } | { pass: false; retryAfterMs: number };

const MAX_EVENTS = 2_000;

/**
 * A circuit breaker for one route in one isolate. Closed, it watches a sliding window of origin
 * outcomes and opens when enough of them failed (5xx, timeout, network error) or the median
 * latency passes the bound. Open, it sheds everything until the cool-down ends; then it lets
 * `probes` requests through (half-open) and closes only when all of them succeed. The origin sees
 * no traffic while the breaker is open.
 *
 * @example
 * const a = breaker.admit(now);
 * if (!a.pass) return shed(a.retryAfterMs);
 * const res = await forward(...); breaker.record(res.status < 500, latency, now, a.probe);
 */
export class CircuitBreaker {
  private events: Array<{ t: number; ok: boolean; ms: number }> = [];
  private openUntil = 0;
  private halfOpen = false;
  private probesOut = 0;
  private probesOk = 0;

  constructor(private readonly s: BreakerSettings) {}

  get state(): "closed" | "open" | "half-open" {
    if (this.halfOpen) return "half-open";
    return this.openUntil > 0 ? "open" : "closed";
  }

  admit(now: number): Admission {
    if (this.openUntil > 0 && !this.halfOpen) {
      if (now < this.openUntil) return { pass: false, retryAfterMs: this.openUntil - now };
      this.halfOpen = true;
      this.probesOut = 0;
      this.probesOk = 0;
    }
    if (this.halfOpen) {
      if (this.probesOut >= this.s.probes) return { pass: false, retryAfterMs: Math.max(1_000, this.s.cooldown / 10) };
      this.probesOut++;
      return { pass: true, probe: true };
    }
    return { pass: true, probe: false };
  }

  record(ok: boolean, latencyMs: number, now: number, probe: boolean): void {
    if (probe && this.halfOpen) {
      if (!ok) return this.open(now);
      if (++this.probesOk >= this.s.probes) this.close();
      return;
    }
    if (this.state !== "closed") return;
    this.events.push({ t: now, ok, ms: latencyMs });
    const from = now - this.s.window;
    let drop = 0;
    while (drop < this.events.length && ((this.events[drop] as { t: number }).t < from || this.events.length - drop > MAX_EVENTS)) drop++;
    if (drop) this.events.splice(0, drop);
    if (this.events.length < this.s.min_requests) return;
    const failed = this.events.filter((e) => !e.ok).length;
    const slow = this.s.latency_ms !== undefined && median(this.events.map((e) => e.ms)) > this.s.latency_ms;
    if (failed / this.events.length >= this.s.error_ratio || slow) this.open(now);
  }

  /** Opens the breaker until `until` (a cool-down from now by default), e.g. when another isolate opened it. */
  open(now: number, until = now + this.s.cooldown): void {
    this.openUntil = until;
    this.halfOpen = false;
    this.events = [];
  }

  /** When the breaker reopens for good from a shared state, callers keep their own clock. */
  get until(): number {
    return this.openUntil;
  }

  private close(): void {
    this.openUntil = 0;
    this.halfOpen = false;
    this.events = [];
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? 0;
}
