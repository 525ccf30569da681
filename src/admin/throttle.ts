import { hashIdentifier } from "../keys/hash.js";
import { Problem } from "../problem.js";
import { adminAuthKey } from "../store/layout.js";
import type { Store } from "../store/redis.js";
import { orElse } from "../util/log.js";

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

  constructor(private readonly maxEntries: number) {}

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

/**
 * Throttles guessing of the admin token (bearer or login form): a client (its CF-Connecting-IP)
 * with AUTH_FAILURE_LIMIT failures in a fixed window of AUTH_WINDOW_MS is refused until the window
 * ends, before its credential is compared, so a right guess after the limit gets nothing either.
 *
 * The count lives in the home region's Redis, so every isolate sees it: INCR + PEXPIRE on
 * `{key_prefix}:admin-auth:{hash of the IP}` (client input never reaches a key name unhashed).
 * Every attempt is counted before the comparison and given back when it succeeds (or is refused),
 * so guesses sent all at once cannot all slip in before the count catches up. The isolate's
 * `throttle` also remembers the failures and refusals it saw and counts alone while Redis cannot
 * be reached: an outage is neither a 500 nor a way around the throttle in this isolate.
 */
export async function beginAuthAttempt(
  throttle: AuthThrottle,
  store: Store | undefined,
  keyPrefix: string,
  ip: string,
  now = Date.now(),
): Promise<AuthAttempt> {
  const id = await hashIdentifier(ip);
  const key = adminAuthKey(keyPrefix, id);
  const counted = store && (await orElse(countInRedis(store, key), undefined, "admin_auth_count_failed"));
  if (!store || !counted) return throttle.countAlone(id, now);
  const retryAfterMs = Math.max(
    counted.attempts > AUTH_FAILURE_LIMIT ? counted.windowLeftMs : 0,
    throttle.refusedForMs(id, now),
  );
  if (retryAfterMs > 0) {
    throttle.remember(id, AUTH_FAILURE_LIMIT, now + retryAfterMs, now);
    await giveBack(store, key);
    return { retryAfterMs, settle: async () => undefined };
  }
  return {
    retryAfterMs: 0,
    async settle(succeeded) {
      if (succeeded) return giveBack(store, key);
      const seenHere = (throttle.live(id, now)?.failures ?? 0) + 1;
      throttle.remember(id, Math.max(counted.attempts, seenHere), now + counted.windowLeftMs, now);
    },
  };
}

/** The 429 problem a throttled client gets instead of a comparison. */
export function throttled(retryAfterMs: number): Problem {
  return new Problem({
    status: 429,
    title: "Too many failed authentications",
    detail: `${AUTH_FAILURE_LIMIT} failed admin authentications from this client within ${AUTH_WINDOW_MS / 1000} s: nothing is compared until the window ends`,
    extensions: { retry_after_ms: retryAfterMs },
    headers: { "Retry-After": String(Math.max(1, Math.ceil(retryAfterMs / 1000))) },
  });
}

/** INCR (this attempt included) and the window's time left; a key found without a TTL gets one. */
async function countInRedis(store: Store, key: string): Promise<{ attempts: number; windowLeftMs: number }> {
  const [attempts, ttl] = (await store.pipeline((b) => b.incr(key).pttl(key))).map(Number) as [number, number];
  if (ttl >= 0) return { attempts, windowLeftMs: ttl };
  await store.keys.pexpire(key, AUTH_WINDOW_MS);
  return { attempts, windowLeftMs: AUTH_WINDOW_MS };
}

/** DECR, best effort: a key the DECR made anew (its window had just ended) is deleted, not left without a TTL. */
async function giveBack(store: Store, key: string): Promise<void> {
  try {
    const [, ttl] = (await store.pipeline((b) => b.decr(key).pttl(key))).map(Number);
    if (ttl === -1) await store.keys.del(key);
  } catch {
    // an attempt not given back counts as one failure more: stricter, never looser
  }
}
