import { hashIdentifier } from "../identity/hash.js";
import { Problem } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";
import { adminAuthKey } from "../store/layout.js";
import type { Store } from "../store/redis.js";
import { orElse } from "../util/log.js";

// The isolate's memory of failed authentications stands apart (the runtime holds one per isolate
// and imports nothing of the admin); it is re-exported here for the admin's own callers.
import {
  AUTH_FAILURE_LIMIT,
  AUTH_WINDOW_MS,
  type AuthAttempt,
  type AuthThrottle,
} from "../features/access/auth-throttle.js";

export {
  AUTH_FAILURE_LIMIT,
  AUTH_WINDOW_MS,
  AuthThrottle,
  type AuthAttempt,
  type AuthWindow,
} from "../features/access/auth-throttle.js";

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
    type: PROBLEMS.tooManyFailedAuthentications,
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
