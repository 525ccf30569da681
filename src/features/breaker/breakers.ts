import type { Route } from "../../config/index.js";
import type { Store } from "../../store/redis.js";
import { CircuitBreaker } from "./circuit-breaker.js";
import { logError } from "../../util/log.js";

const SYNC_EVERY_MS = 1_000;
/** Sharing the breaker is background work: a second is plenty, and it never holds a request up. */
export const SHARE_TIMEOUT_MS = 1_000;

/** Where a shared breaker's open state lives: the region's Redis, and the key in it. */
export interface BreakerShare {
  store: Store | undefined;
  key: string;
  defer: (work: Promise<unknown>) => void;
}

/**
 * One breaker per route per isolate (and per configuration: a new configuration starts closed).
 * With `shared = true` the open state also lives in the region's Redis (value: open until, epoch
 * ms): an isolate that opens writes it, and every isolate reads it back at most once a second in
 * the background, so all isolates of a region agree within about a second without a Redis call
 * on the request path.
 */
export class Breakers {
  private readonly breakers = new WeakMap<Route, CircuitBreaker>();
  /** When each shared breaker state was last read from Redis, per route. */
  private readonly lastSync = new WeakMap<Route, number>();

  /** The route's breaker, or `undefined` when it has none. */
  of(route: Route, share: BreakerShare): CircuitBreaker | undefined {
    const settings = route.breaker;
    if (!settings) return undefined;
    let b = this.breakers.get(route);
    if (!b) this.breakers.set(route, (b = new CircuitBreaker(settings)));
    if (settings.shared) this.sync(route, b, share);
    return b;
  }

  /**
   * Tells the route's breaker how the origin did for this request's client (`CF-Connecting-IP`,
   * which the breaker caps per client so one client cannot open it for everybody); shares a
   * fresh opening when configured to.
   */
  record(
    route: Route,
    client: string,
    outcome: { ok: boolean; latencyMs: number; probe: boolean },
    share: BreakerShare,
  ): void {
    const b = route.breaker ? this.breakers.get(route) : undefined;
    if (!b) return;
    const before = b.until;
    b.record(client, outcome.ok, outcome.latencyMs, Date.now(), outcome.probe);
    if (b.until > before && route.breaker?.shared && share.store) {
      share.defer(
        share.store.keys
          .set(share.key, String(b.until), { px: Math.max(1, b.until - Date.now()) })
          .catch((e: unknown) => logError("breaker_share_failed", e, { route: route.name })),
      );
    }
  }

  private sync(route: Route, b: CircuitBreaker, share: BreakerShare): void {
    const now = Date.now();
    if (now - (this.lastSync.get(route) ?? 0) < SYNC_EVERY_MS) return;
    this.lastSync.set(route, now);
    if (!share.store) return;
    share.defer(
      share.store.keys
        .get(share.key)
        .then((v) => {
          const until = Number(v ?? 0);
          if (until > Date.now() && b.state === "closed") b.open(Date.now(), until);
        })
        .catch((e: unknown) => logError("breaker_sync_failed", e, { route: route.name })),
    );
  }
}
