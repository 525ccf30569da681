import type { Config, Limit, Route } from "../../../config/index.js";
import { identityHash, type KeyHash } from "../../../identity/hash.js";
import { identify, readPart, type IdentityFacts } from "../../../identity/identify.js";
import { allRegions } from "../../../region/index.js";
import { equalShare } from "../../../region/shares.js";
import { StoreError } from "../../../store/deadline.js";
import { bucketKey, shareKeys } from "../../../store/layout.js";
import type { Store } from "../../../store/redis.js";
import type { Bucket, BucketParams } from "../types.js";
import { algorithm } from "../algorithms/registry.js";
import { ownValue } from "../../../util/own.js";
import { floorOf, isPriority, priorityOf, type Priority } from "./priority.js";

export interface RegionStores {
  region: string;
  /** The region's own Redis (or the home region's, when the region has no secrets of its own). */
  regional: Store | undefined;
  home: Store | undefined;
}

/** A request sluice refuses before deciding: an identity it must carry, or a cost it cannot have. */
export class BadLimitInput extends Error {
  constructor(
    readonly limit: string,
    message: string,
  ) {
    super(message);
    this.name = "BadLimitInput";
  }
}

/**
 * The bucket of each limit of `route` that this request falls into, where it lives, and the
 * figures it is decided with: `global` limits in the home region's Redis, one bucket for the
 * world; `region` and `split` limits in the region's Redis. Throws what `keyedBuckets` throws, and
 * `StoreError` when a needed Redis is not configured.
 */
export async function bucketsFor(
  route: Route,
  facts: IdentityFacts,
  config: Config,
  stores: RegionStores,
): Promise<Bucket[]> {
  const regionCount = allRegions(config).length;
  const keyed = await keyedBuckets(route, facts, config, stores.region);
  return keyed.map((b): Bucket => {
    const { limit, params } = b;
    const global = limit.scope === "global";
    const store = global ? stores.home : stores.regional;
    if (!store)
      throw new StoreError(
        "unreachable",
        `no Upstash URL/token for region "${global ? config.home_region : stores.region}" nor for the home region`,
      );
    const bucket: Bucket = { ...b, store };
    if (limit.scope === "split")
      bucket.split = {
        ...shareKeys(config.key_prefix, route.name, limit.name, stores.region),
        start: equalShare(params.rate, params.burst, regionCount),
      };
    return bucket;
  });
}

/** A bucket as the request identifies it, before any Redis is involved (what local decisions need). */
export type KeyedBucket = Pick<Bucket, "limit" | "key" | "slot" | "entry"> & { params: BucketParams };

/**
 * The bucket of each limit of `route` that this request falls into, and the figures it is
 * decided with, wherever it lives: the region is part of the hashed identifier of `region` and
 * `split` buckets, so regions sharing one database still keep separate buckets. A tier takes its
 * rate from the limit's table; a header cost is read and bounded. Limits whose identity is
 * missing under `missing = "skip"` are left out. The route's `priority` sets each bucket's floor. A concurrency limit's bucket names the in-flight
 * slot the request takes (a fresh UUID), a sliding log's the request's entries (logEntryId). Throws `BadLimitInput` for a missing identity
 * under `missing = "reject"` or a bad cost.
 */
export async function keyedBuckets(
  route: Route,
  facts: IdentityFacts,
  config: Config,
  region: string,
): Promise<KeyedBucket[]> {
  const priority = requestPriority(route, facts);
  const buckets = await Promise.all(
    route.limits.map(async (limit): Promise<KeyedBucket | undefined> => {
      const identity = identify(limit.key, limitFacts(limit, facts), limit.missing);
      if (identity.kind === "skip") return undefined;
      if (identity.kind === "missing")
        throw new BadLimitInput(
          limit.name,
          `limit "${limit.name}" needs ${identity.part}, which the request does not carry`,
        );
      const params = paramsFor(limit, facts, priority);
      const hash = await bucketHash(limit, identity.id, region);
      const key = bucketKey(config.key_prefix, route.name, limit.name, hash);
      const callId = algorithm(limit.algorithm).callId;
      if (callId === "slot") return { limit, key, params, slot: crypto.randomUUID() };
      if (callId === "entry") return { limit, key, params, entry: logEntryId() };
      return { limit, key, params };
    }),
  );
  return buckets.filter((b): b is KeyedBucket => b !== undefined);
}

/** The request's priority: as the route's setting names it, or as the app's code tells (a name it does not know: default). */
function requestPriority(route: Route, facts: IdentityFacts): Priority {
  const setting = route.priority ?? "default";
  if (typeof setting === "string") return priorityOf(setting, facts);
  const named = facts.context ? setting(facts.context)?.trim().toLowerCase() : undefined;
  return isPriority(named) ? named : "default";
}

/** The facts a limit reads: with a key from the app's code, that key's value for this request (`undefined`: missing). */
export function limitFacts(limit: Limit, facts: IdentityFacts): IdentityFacts {
  return limit.keyOf && facts.context ? { ...facts, code: limit.keyOf(facts.context) } : facts;
}

/**
 * A fresh id for a request's entries in a sliding log: 96 random bits, 16 base64url characters
 * (each log member carries it, so it is kept shorter than a UUID).
 */
export function logEntryId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return btoa(String.fromCharCode(...bytes))
    .replaceAll("+", "-")
    .replaceAll("/", "_");
}

/**
 * The hash of a bucket's identifier: `global` limits have one bucket for the world; the others
 * carry the region, so regions sharing one database still keep separate buckets.
 */
export function bucketHash(limit: Pick<Limit, "scope">, identity: string, region: string): Promise<KeyHash> {
  return identityHash(identity, limit.scope === "global" ? undefined : region);
}

/**
 * The rate of the request's tier (or the limit's own), the request's cost, and the floor its
 * priority must leave in the bucket (the limit's reserve for priorities above it, on those figures).
 */
function paramsFor(limit: Limit, facts: IdentityFacts, priority: Priority): BucketParams {
  const tierValue = limit.tier ? readPart(limit.tier, facts) : undefined;
  // the tier's name comes from the request: only a configured tier counts, never an inherited member
  const tier = tierValue !== undefined ? ownValue(limit.rates, tierValue) : undefined;
  const base = tier
    ? { rate: tier.rate, period: tier.period, burst: tier.rate }
    : { rate: limit.rate, period: limit.period, burst: limit.burst };
  const floor = floorOf({ algorithm: limit.algorithm, reserve: limit.reserve, ...base }, priority);
  return { ...base, cost: costOf(limit, facts), ...(floor > 0 ? { floor } : {}) };
}

function costOf(limit: Limit, facts: IdentityFacts): number {
  if (facts.cost !== undefined) return facts.cost;
  if (!limit.costHeader) return limit.cost;
  const text = facts.headers?.get(limit.costHeader) ?? null;
  if (text === null) return 1;
  const max = limit.max_cost ?? 1;
  if (!/^\d{1,9}$/.test(text.trim()) || Number(text) < 1 || Number(text) > max) {
    throw new BadLimitInput(limit.name, `${limit.costHeader} must be a whole number from 1 to ${max}`);
  }
  return Number(text);
}
