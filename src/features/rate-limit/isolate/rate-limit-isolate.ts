import { AdaptiveReports } from "../adaptive/reports.js";
import type { IsolateState } from "../decision/decision.js";
import { OverrideCopies } from "../decision/overrides.js";
import type { StoreVersions } from "../../../store/versions.js";
import { BlockedBuckets } from "./blocked.js";
import { LeaseBroker } from "./lease-broker.js";
import { LocalBuckets } from "./local.js";

/** Bound on each per-isolate table, so a flood of distinct clients cannot grow an isolate's memory. */
const ENTRIES = 10_000;

/**
 * What the rate limiter keeps in one isolate between requests, and never shares with another:
 * owned by the isolate's runtime (`rateLimitIsolate`), which imports none of it, so that the
 * runtime stands below the capabilities.
 */
export class RateLimitIsolate {
  /** Buckets known to be closed until a time: refused without a Redis call. */
  readonly blocked = new BlockedBuckets(ENTRIES);
  /** Buckets this isolate enforces on its own while Redis fails (`on_store_error = "local"`). */
  readonly localBuckets = new LocalBuckets(ENTRIES);
  /** Runtime overrides of limits, copied from Redis and refetched in the background when its counter moves. */
  readonly overrides: OverrideCopies;
  /**
   * Tokens Redis has debited for this isolate, spent without a round trip (docs/regions-and-leases.md, Leases);
   * its background calls carry the overrides' copy, and their replies report the change counter like a decision's.
   */
  readonly leases: LeaseBroker;
  /** What the origins of adaptive routes did, waiting to be reported to their region's Redis. */
  readonly adaptive = new AdaptiveReports();

  /** @param versions the isolate's change counter of each Redis, as decisions last reported it (the runtime's) */
  constructor(versions: StoreVersions) {
    const overrides = new OverrideCopies(1_000, versions);
    this.overrides = overrides;
    this.leases = new LeaseBroker(
      (b, now) => overrides.input(b, now),
      ENTRIES,
      (r) => overrides.observe(r.store, r.version, r.receivedAt),
    );
  }

  /** What a decision needs of the isolate, without its own buckets (a caller whose failed Redis is thrown, as the queue's). */
  get decisions(): IsolateState {
    return { blocked: this.blocked, leases: this.leases, overrides: this.overrides };
  }
}

/** The isolate's part of a runtime: what `rateLimitIsolate` needs of it. */
export interface IsolateOwner {
  own<T extends object>(kind: new (...args: never[]) => T, make: () => T): T;
  readonly versions: StoreVersions;
}

/**
 * The rate limiter's state in this isolate, made on its first decision (one Map lookup after that).
 *
 * @example decide(buckets, rateLimitIsolate(scope.runtime), Date.now(), scope.defer)
 */
export function rateLimitIsolate(runtime: IsolateOwner): RateLimitIsolate {
  return runtime.own(RateLimitIsolate, () => new RateLimitIsolate(runtime.versions));
}
