import type { ListCache } from "./features/access/lists.js";
import { AdaptiveReports } from "./features/rate-limit/adaptive/reports.js";
import { BlockedBuckets } from "./features/rate-limit/isolate/blocked.js";
import type { IsolateState } from "./features/rate-limit/decision/decision.js";
import { LeaseBroker } from "./features/rate-limit/isolate/lease-broker.js";
import { LocalBuckets } from "./features/rate-limit/isolate/local.js";
import { OverrideCopies } from "./features/rate-limit/decision/overrides.js";
import { MetricsBuffer } from "./metrics/index.js";
import { RebalanceClock } from "./region/rebalance.js";
import { Stores, type Connect } from "./region/index.js";
import type { Config } from "./config/index.js";
import { StoreRegistry } from "./store/redis.js";
import { StoreVersions } from "./store/versions.js";

/** Bound on each per-isolate table, so a flood of distinct clients cannot grow an isolate's memory. */
const ENTRIES = 10_000;

/** The state of a feature that only some Workers use, made on first use. */
type Owned = new (...args: never[]) => object;

/**
 * What one isolate keeps between requests, and never shares with another isolate: created once
 * per isolate by the Worker (or by the first middleware that needs it), and by tests that want a
 * fresh one. Nothing else in `src/` keeps state in a module variable: it is all here.
 */
export class Runtime {
  /** Redis clients, round-trip estimates, circuits and loaded scripts, per database. */
  readonly registry = new StoreRegistry();
  /** Buckets known to be closed until a time: refused without a Redis call. */
  readonly blocked = new BlockedBuckets(ENTRIES);
  /** Buckets this isolate enforces on its own while Redis fails (`on_store_error = "local"`). */
  readonly localBuckets = new LocalBuckets(ENTRIES);
  /** Each Redis's change counter as decisions last reported it: what tells the copies below they are behind. */
  readonly versions = new StoreVersions();
  /** Runtime overrides of limits, copied from Redis and refetched in the background when its counter moves. */
  readonly overrides = new OverrideCopies(1_000, this.versions);
  /**
   * Tokens Redis has debited for this isolate, spent without a round trip (docs/regions-and-leases.md, Leases);
   * its background calls carry the overrides' copy, and their replies report the change counter like a decision's.
   */
  readonly leases = new LeaseBroker(
    (b, now) => this.overrides.input(b, now),
    ENTRIES,
    (r) => this.overrides.observe(r.store, r.version, r.receivedAt),
  );
  /**
   * Deny and allow lists, copied from Redis and read again in the background when a counter moves:
   * made by the first middleware that applies or manages them (`listsOf`, src/features/access/lists.ts),
   * so a Worker that applies none (`rateLimit()` alone) carries none of their code. A ban puts its
   * entry in force here at once when there is a copy, and there is nothing to do when there is none.
   */
  lists?: ListCache;
  /** Decision counts waiting to be flushed to Redis. */
  readonly metrics = new MetricsBuffer();
  /** When this isolate last started a rebalance of `split` limits. */
  readonly rebalance = new RebalanceClock();
  /** What the origins of adaptive routes did, waiting to be reported to their region's Redis. */
  readonly adaptive = new AdaptiveReports();
  private readonly owned = new Map<Owned, object>();

  /**
   * The isolate's state of a feature not every Worker has (the gateway's validated configurations,
   * the breakers, the admin's login throttle, the JWKS keys), made on its first use: the runtime imports none of
   * them, so an app using `rateLimit()` alone bundles none of their code.
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

  /** What a decision needs of the isolate. */
  get decisions(): IsolateState {
    return { blocked: this.blocked, leases: this.leases, overrides: this.overrides };
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
