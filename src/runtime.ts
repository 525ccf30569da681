import { MetricsBuffer } from "./metrics/index.js";
import { RebalanceClock } from "./region/rebalance.js";
import { Stores, type Connect } from "./region/index.js";
import type { Config } from "./config/index.js";
import { StoreRegistry } from "./store/redis.js";
import { StoreVersions } from "./store/versions.js";

/** The state of a feature, made on its first use. */
type Owned = new (...args: never[]) => object;

/**
 * What one isolate keeps between requests, and never shares with another isolate: created once
 * per isolate by the Worker (or by the first middleware that needs it), and by tests that want a
 * fresh one. Nothing else in `src/` keeps state in a module variable: it is all here. It imports
 * no capability (src/features/): each keeps its own part here through `own` (the rate limiter's
 * blocked buckets, leases and overrides' copy, the lists' copy, the breakers), so the runtime
 * stands below them and the per-request context that carries it imports none of them.
 */
export class Runtime {
  /** Redis clients, round-trip estimates, circuits and loaded scripts, per database. */
  readonly registry = new StoreRegistry();
  /** Each Redis's change counter as decisions last reported it: what tells the copies below they are behind. */
  readonly versions = new StoreVersions();
  /** Decision counts waiting to be flushed to Redis. */
  readonly metrics = new MetricsBuffer();
  /** When this isolate last started a rebalance of `split` limits. */
  readonly rebalance = new RebalanceClock();
  private readonly owned = new Map<Owned, object>();

  /**
   * The isolate's state of a feature (the rate limiter's, the lists' copy, the gateway's validated
   * configurations, the breakers, the admin's login throttle, the JWKS keys), made on its first use:
   * the runtime imports none of them, so an app using `rateLimit()` alone bundles none of the others' code.
   *
   * @example runtime.own(Breakers).of(route)
   */
  own<T extends object>(kind: new () => T): T;
  /** The same, made by `make` (state that needs the runtime's own parts, such as its change counters). */
  own<T extends object>(kind: new (...args: never[]) => T, make: () => T): T;
  own<T extends object>(kind: new (...args: never[]) => T, make?: () => T): T {
    let state = this.owned.get(kind);
    if (!state) this.owned.set(kind, (state = make ? make() : new (kind as new () => T)()));
    return state as T;
  }

  /** The deployment's databases, reached through `connect`. */
  stores(connect: Connect, config: Pick<Config, "home_region" | "timeout_ms" | "max_timeout_ms">): Stores {
    return new Stores(this.registry, connect, config);
  }
}

let shared: Runtime | undefined;

/** The isolate's runtime, for middleware not given one of their own. */
export function isolateRuntime(): Runtime {
  shared ??= new Runtime();
  return shared;
}
