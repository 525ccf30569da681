import type { Route } from "../../config/index.js";
import { keyPrefixOf } from "../../store/layout.js";
import type { Store } from "../../store/redis.js";
import { bumpVersionIn, StoreVersions } from "../../store/versions.js";
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
 * ms): an isolate that opens writes it and bumps the Redis's change counter (`{prefix}:version`)
 * in the same request, and every isolate reads it back in the background when a decision of its
 * has reported the counter moved (at most once a second while no decision has reported it, e.g.
 * a route without limits), so all isolates of a region agree without a Redis call on the request
 * path, and without any while nothing changes.
 */
export class Breakers {
  private readonly breakers = new WeakMap<Route, CircuitBreaker>();
  /** When each shared breaker state was last read from Redis, per route, and at which version of the counter. */
  private readonly lastSync = new WeakMap<Route, { at: number; version?: number }>();

  constructor(private readonly versions = new StoreVersions()) {}

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
      const { key } = share;
      share.defer(
        share.store
          .pipeline((p) => {
            p.setPx(key, String(b.until), Math.max(1, b.until - Date.now()));
            bumpVersionIn(p, keyPrefixOf(key));
          })
          .catch((e: unknown) => logError("breaker_share_failed", e, { route: route.name })),
      );
    }
  }

  private sync(route: Route, b: CircuitBreaker, share: BreakerShare): void {
    const now = Date.now();
    const version = share.store ? this.versions.of(share.store.id) : undefined;
    const last = this.lastSync.get(route);
    // nothing moved since the last read; or a read less than a second ago (no counter reported yet, a failed read)
    if ((version !== undefined && last?.version === version) || (last && now - last.at < SYNC_EVERY_MS)) return;
    const synced: { at: number; version?: number } = { at: now };
    this.lastSync.set(route, synced);
    if (!share.store) return;
    share.defer(
      share.store.keys
        .get(share.key)
        .then((v) => {
          // read at this version: nothing to read again until a decision reports another
          synced.version = version;
          const until = Number(v ?? 0);
          if (until > Date.now() && b.state === "closed") b.open(Date.now(), until);
        })
        .catch((e: unknown) => logError("breaker_sync_failed", e, { route: route.name })),
    );
  }
}
