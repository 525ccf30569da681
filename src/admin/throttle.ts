import { hashIdentifier } from "../keys/hash.js";
import { problem } from "../shed/problem.js";
import type { Store } from "../store/redis.js";

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

/**
 * Throttles guessing of the admin token (bearer or login form): a client (its CF-Connecting-IP)
 * with AUTH_FAILURE_LIMIT failures in a fixed window of AUTH_WINDOW_MS is refused until the window
 * ends, before its credential is compared, so a right guess after the limit gets nothing either.
 *
 * The count lives in the home region's Redis, so every isolate sees it: INCR + PEXPIRE on
 * `{key_prefix}:admin-auth:{hash of the IP}` (client input never reaches a key name unhashed).
 * Every attempt is counted before the comparison and given back when it succeeds (or is refused),
 * so guesses sent all at once cannot all slip in before the count catches up. Each isolate also
 * remembers the failures and refusals it saw and counts alone while Redis cannot be reached: an
 * outage is neither a 500 nor a way around the throttle in this isolate.
 */
export async function beginAuthAttempt(store: Store | undefined, keyPrefix: string, ip: string, now = Date.now()): Promise<AuthAttempt> {
  const id = await hashIdentifier(ip);
  const key = `${keyPrefix}:admin-auth:${id}`;
  const counted = store && (await countInRedis(store, key).catch(() => undefined));
  if (!store || !counted) return countInMemory(id, now);
  // what this isolate knows counts too: a Redis that lost the key (failover) lifts nothing here
  const retryAfterMs = Math.max(counted.attempts > AUTH_FAILURE_LIMIT ? counted.windowLeftMs : 0, refusedForMs(id, now));
  if (retryAfterMs > 0) {
    remember(id, AUTH_FAILURE_LIMIT, now + retryAfterMs, now);
    await giveBack(store, key);
    return { retryAfterMs, settle: async () => undefined };
  }
  return {
    retryAfterMs: 0,
    async settle(succeeded) {
      if (succeeded) return giveBack(store, key);
      const seenHere = (liveWindow(id, now)?.failures ?? 0) + 1;
      remember(id, Math.max(counted.attempts, seenHere), now + counted.windowLeftMs, now);
    },
  };
}

/** The 429 problem a throttled client gets instead of a comparison. */
export function throttledResponse(retryAfterMs: number): Response {
  return problem({
    status: 429,
    title: "Too many failed authentications",
    detail: `${AUTH_FAILURE_LIMIT} failed admin authentications from this client within ${AUTH_WINDOW_MS / 1000} s: nothing is compared until the window ends`,
    extensions: { retry_after_ms: retryAfterMs },
    headers: { "Retry-After": String(Math.max(1, Math.ceil(retryAfterMs / 1000))) },
  });
}

/** INCR (this attempt included) and the window's time left; a key found without a TTL gets one. */
async function countInRedis(store: Store, key: string): Promise<{ attempts: number; windowLeftMs: number }> {
  const [attempts, ttl] = (await store.redis.pipeline().incr(key).pttl(key).exec()).map(Number) as [number, number];
  if (ttl >= 0) return { attempts, windowLeftMs: ttl };
  await store.redis.pexpire(key, AUTH_WINDOW_MS);
  return { attempts, windowLeftMs: AUTH_WINDOW_MS };
}

/** DECR, best effort: a key the DECR made anew (its window had just ended) is deleted, not left without a TTL. */
async function giveBack(store: Store, key: string): Promise<void> {
  try {
    const [, ttl] = (await store.redis.pipeline().decr(key).pttl(key).exec()).map(Number);
    if (ttl === -1) await store.redis.del(key);
  } catch {
    // an attempt not given back counts as one failure more: stricter, never looser
  }
}

interface Window {
  failures: number;
  resetAt: number;
}

/** Bounded, so a flood of clients cannot grow an isolate's memory; expired windows go first. */
const MAX_REMEMBERED = 10_000;
const remembered = new Map<string, Window>();

function liveWindow(id: string, now: number): Window | undefined {
  const w = remembered.get(id);
  return w && w.resetAt > now ? w : undefined;
}

function refusedForMs(id: string, now: number): number {
  const w = liveWindow(id, now);
  return w && w.failures >= AUTH_FAILURE_LIMIT ? w.resetAt - now : 0;
}

function remember(id: string, failures: number, resetAt: number, now: number): void {
  const w = liveWindow(id, now);
  if (w) {
    w.failures = Math.max(w.failures, failures);
    w.resetAt = Math.max(w.resetAt, resetAt);
    return;
  }
  if (remembered.size >= MAX_REMEMBERED) forgetOldest(now);
  remembered.set(id, { failures, resetAt });
}

function forgetOldest(now: number): void {
  for (const [id, w] of remembered) if (w.resetAt <= now) remembered.delete(id);
  for (const id of remembered.keys()) {
    if (remembered.size < MAX_REMEMBERED) break;
    remembered.delete(id);
  }
}

/** Without Redis: this isolate's own window, with the attempt counted until it proves good. */
function countInMemory(id: string, now: number): AuthAttempt {
  const retryAfterMs = refusedForMs(id, now);
  if (retryAfterMs > 0) return { retryAfterMs, settle: async () => undefined };
  remember(id, 0, now + AUTH_WINDOW_MS, now);
  const w = remembered.get(id) as Window;
  w.failures += 1;
  return {
    retryAfterMs: 0,
    async settle(succeeded) {
      if (succeeded) w.failures = Math.max(0, w.failures - 1);
    },
  };
}
