import type { Exchange } from "../gateway.js";
import { regionStore } from "../region/index.js";
import { CircuitBreaker } from "./breaker.js";

/** One breaker per route per isolate (and per configuration: a new configuration starts closed). */
const breakers = new WeakMap<object, CircuitBreaker>();
/** When each shared breaker state was last read from Redis, per route. */
const lastSync = new WeakMap<object, number>();

const SYNC_EVERY_MS = 1_000;
/** Sharing the breaker is background work: a second is plenty, and it never holds a request up. */
const SHARE_TIMEOUT_MS = 1_000;

/**
 * The route's breaker, or `undefined` when it has none. With `shared = true` the open state also
 * lives in the region's Redis (`{key_prefix}:{route}:breaker`, value: open until, epoch ms): an
 * isolate that opens writes it, and every isolate reads it back at most once a second in the
 * background, so all isolates of a region agree within about a second without a Redis call on
 * the request path.
 */
export function breakerFor(x: Exchange): CircuitBreaker | undefined {
  const settings = x.route.breaker;
  if (!settings) return undefined;
  let b = breakers.get(x.route);
  if (!b) breakers.set(x.route, (b = new CircuitBreaker(settings)));
  if (settings.shared) syncShared(x, b);
  return b;
}

/**
 * Tells the route's breaker how the origin did for this request's client (`CF-Connecting-IP`,
 * which the breaker caps per client so one client cannot open it for everybody); shares a fresh
 * opening when configured to.
 */
export function recordOutcome(x: Exchange, ok: boolean, latencyMs: number, probe: boolean): void {
  const b = x.route.breaker ? breakers.get(x.route) : undefined;
  if (!b) return;
  const before = b.until;
  b.record(x.facts.ip, ok, latencyMs, Date.now(), probe);
  if (b.until > before && x.route.breaker?.shared) {
    const store = regionStore(x.env, x.config, x.region, SHARE_TIMEOUT_MS);
    if (store) x.defer(store.redis.set(sharedKey(x), String(b.until), { px: Math.max(1, b.until - Date.now()) }).catch(() => undefined));
  }
}

function syncShared(x: Exchange, b: CircuitBreaker): void {
  const now = Date.now();
  if (now - (lastSync.get(x.route) ?? 0) < SYNC_EVERY_MS) return;
  lastSync.set(x.route, now);
  const store = regionStore(x.env, x.config, x.region, SHARE_TIMEOUT_MS);
  if (!store) return;
  x.defer(
    store.redis
      .get<string>(sharedKey(x))
      .then((v) => {
        const until = Number(v ?? 0);
        if (until > Date.now() && b.state === "closed") b.open(Date.now(), until);
      })
      .catch(() => undefined),
  );
}

function sharedKey(x: Exchange): string {
  return `${x.config.key_prefix}:${x.route.name}:breaker`;
}
