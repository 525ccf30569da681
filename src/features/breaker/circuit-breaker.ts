/** A route's breaker settings (see the `breaker` table of a route). */
export interface BreakerSettings {
  window: number;
  min_requests: number;
  error_ratio: number;
  latency_ms?: number | undefined;
  cooldown: number;
  probes: number;
  /**
   * The most of the window one client may account for, as a share of `min_requests` (1: no cap).
   * A client's events beyond `max(1, ceil(min_requests × client_share))` do not count.
   */
  client_share: number;
}

/** What the breaker lets a request do: go to the origin, go as a half-open probe, or be shed. */
export type Admission = { pass: true; probe: boolean } | { pass: false; retryAfterMs: number };

const MAX_EVENTS = 2_000;

/** One origin outcome in the window, and whose request it was (the client's IP). */
interface OutcomeEvent {
  t: number;
  ok: boolean;
  ms: number;
  client: string;
}

/**
 * A circuit breaker for one route in one isolate. Closed, it watches a sliding window of origin
 * outcomes and opens when enough of them failed (5xx, timeout, network error) or the median
 * latency passes the bound. Open, it sheds everything until the cool-down ends; then it lets
 * `probes` requests through (half-open) and closes only when all of them succeed. The origin sees
 * no traffic while the breaker is open.
 *
 * The breaker is shared by every client of the route, so one client must not be able to open it
 * for all the others (by sending requests it knows make the origin fail) nor to hold it closed
 * (by flooding the window with successes): only a client's most recent `perClientCap` events
 * count, so opening needs outcomes from at least `min_requests / perClientCap` clients.
 *
 * @example
 * const a = breaker.admit(now);
 * if (!a.pass) return shed(a.retryAfterMs);
 * const res = await forward(...); breaker.record(clientIp, res.status < 500, latency, now, a.probe);
 */
export class CircuitBreaker {
  /** The window's counted events, oldest first; never more than `perClientCap` of one client. */
  private events: OutcomeEvent[] = [];
  /** How many of `events` each client has. */
  private perClient = new Map<string, number>();
  private readonly perClientCap: number;
  private openUntil = 0;
  private halfOpen = false;
  private probesOut = 0;
  private probesOk = 0;

  constructor(private readonly s: BreakerSettings) {
    this.perClientCap = clientCap(s);
  }

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

  /** A probe let through that never reached the origin gives its place back, so half-open can still close. */
  probeUnused(): void {
    if (this.halfOpen && this.probesOut > 0) this.probesOut--;
  }

  /** Counts one origin outcome of `client`'s request; may open (or, for a probe, close) the breaker. */
  record(client: string, ok: boolean, latencyMs: number, now: number, probe: boolean): void {
    if (probe && this.halfOpen) {
      if (!ok) return this.open(now);
      if (++this.probesOk >= this.s.probes) this.close();
      return;
    }
    if (this.state !== "closed") return;
    this.push({ t: now, ok, ms: latencyMs, client });
    this.dropOlderThan(now - this.s.window);
    if (this.events.length < this.s.min_requests) return;
    const failed = this.events.filter((e) => !e.ok).length;
    const slow = this.s.latency_ms !== undefined && median(this.events.map((e) => e.ms)) > this.s.latency_ms;
    if (failed / this.events.length >= this.s.error_ratio || slow) this.open(now);
  }

  /** Opens the breaker until `until` (a cool-down from now by default), e.g. when another isolate opened it. */
  open(now: number, until = now + this.s.cooldown): void {
    this.openUntil = until;
    this.halfOpen = false;
    this.forget();
  }

  /** When the breaker reopens for good from a shared state, callers keep their own clock. */
  get until(): number {
    return this.openUntil;
  }

  private close(): void {
    this.openUntil = 0;
    this.halfOpen = false;
    this.forget();
  }

  /** Adds an event; a client already at its cap loses its oldest one, so only its latest count. */
  private push(e: OutcomeEvent): void {
    if ((this.perClient.get(e.client) ?? 0) >= this.perClientCap) {
      this.remove(
        this.events.findIndex((old) => old.client === e.client),
        1,
      );
    }
    this.events.push(e);
    this.perClient.set(e.client, (this.perClient.get(e.client) ?? 0) + 1);
  }

  /** Slides the window, and keeps the buffer bounded however many clients there are. */
  private dropOlderThan(from: number): void {
    let drop = 0;
    while (
      drop < this.events.length &&
      ((this.events[drop] as OutcomeEvent).t < from || this.events.length - drop > MAX_EVENTS)
    )
      drop++;
    this.remove(0, drop);
  }

  private remove(start: number, count: number): void {
    if (start < 0 || count <= 0) return;
    for (const e of this.events.splice(start, count)) {
      const left = (this.perClient.get(e.client) ?? 1) - 1;
      if (left > 0) this.perClient.set(e.client, left);
      else this.perClient.delete(e.client);
    }
  }

  private forget(): void {
    this.events = [];
    this.perClient.clear();
  }
}

/**
 * How many of one client's events count: `max(1, ceil(min_requests × client_share))`, so that
 * with the default share (0.25) opening takes failures seen from at least four clients.
 * `client_share = 1` turns the cap off (every event counts, as before the cap existed).
 */
export function clientCap(s: Pick<BreakerSettings, "min_requests" | "client_share">): number {
  if (s.client_share >= 1) return Number.POSITIVE_INFINITY;
  return Math.max(1, Math.ceil(s.min_requests * s.client_share));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? 0;
}
