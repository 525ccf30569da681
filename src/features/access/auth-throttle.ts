/*
 * What one isolate remembers of failed admin authentications (src/admin/throttle.ts counts them
 * in Redis and asks this memory when it cannot). Below the admin, so that the runtime, which
 * keeps one per isolate, imports nothing of the admin.
 */

/** Failed authentications one client may have in a window; the next attempt is refused. */
export const AUTH_FAILURE_LIMIT = 10;
/** The fixed window failures are counted in; a refused client waits until it ends. */
export const AUTH_WINDOW_MS = 60_000;

/** One authentication attempt, counted before its credential is compared. */
export interface AuthAttempt {
  /** ms until the client may try again; 0: go ahead and compare its credential. */
  retryAfterMs: number;
  /** Once compared: a success is given back (successes never count), a failure stays counted. */
  settle(succeeded: boolean): Promise<void>;
}

/** What an isolate remembers of one client's current window. */
export interface AuthWindow {
  failures: number;
  resetAt: number;
}

/**
 * What one isolate has seen of failed admin authentications, per client (hashed IP): the
 * throttle's memory when Redis cannot count, and a floor under what Redis says (a Redis that lost
 * its key in a failover lifts nothing here). Bounded, so a flood of clients cannot grow an
 * isolate's memory; expired windows are forgotten first.
 */
export class AuthThrottle {
  private readonly windows = new Map<string, AuthWindow>();

  /** `maxEntries` bounds the clients remembered, so a flood of them cannot grow the isolate's memory. */
  constructor(private readonly maxEntries = 10_000) {}

  /** The client's window, while it lasts. */
  live(id: string, now: number): AuthWindow | undefined {
    const w = this.windows.get(id);
    return w && w.resetAt > now ? w : undefined;
  }

  /** How long the client is still refused for (0: not refused). */
  refusedForMs(id: string, now: number): number {
    const w = this.live(id, now);
    return w && w.failures >= AUTH_FAILURE_LIMIT ? w.resetAt - now : 0;
  }

  /** Raises what is remembered of the client's window to at least `failures` until at least `resetAt`. */
  remember(id: string, failures: number, resetAt: number, now: number): AuthWindow {
    const w = this.live(id, now);
    if (w) {
      w.failures = Math.max(w.failures, failures);
      w.resetAt = Math.max(w.resetAt, resetAt);
      return w;
    }
    if (this.windows.size >= this.maxEntries) this.forgetOldest(now);
    const fresh = { failures, resetAt };
    this.windows.set(id, fresh);
    return fresh;
  }

  /** Without Redis: this isolate's own window, with the attempt counted until it proves good. */
  countAlone(id: string, now: number): AuthAttempt {
    const retryAfterMs = this.refusedForMs(id, now);
    if (retryAfterMs > 0) return { retryAfterMs, settle: async () => undefined };
    const w = this.remember(id, 0, now + AUTH_WINDOW_MS, now);
    w.failures += 1;
    return {
      retryAfterMs: 0,
      async settle(succeeded) {
        if (succeeded) w.failures = Math.max(0, w.failures - 1);
      },
    };
  }

  private forgetOldest(now: number): void {
    for (const [id, w] of this.windows) if (w.resetAt <= now) this.windows.delete(id);
    // Map iteration is insertion order: what is left over the bound goes oldest first
    for (const id of this.windows.keys()) {
      if (this.windows.size < this.maxEntries) break;
      this.windows.delete(id);
    }
  }
}
