import type { Config, Route } from "../config/index.js";
import { bucketKey, hashIdentifier } from "../keys/hash.js";
import { identify, type RequestFacts } from "../keys/identify.js";
import { allRegions } from "../region/index.js";
import { equalShare } from "../region/shares.js";
import { StoreError } from "../store/deadline.js";
import type { Store } from "../store/redis.js";
import type { Bucket } from "./decide.js";

export interface RegionStores {
  region: string;
  /** The region's own Redis (or the home region's, when the region has no secrets of its own). */
  regional: Store | undefined;
  home: Store | undefined;
}

/**
 * The bucket of each limit of `route` that this request falls into, and where it lives:
 * `global` limits in the home region's Redis, one bucket for the world; `region` and `split`
 * limits in the region's Redis, with the region in the hashed identifier so that regions sharing
 * one database still keep separate buckets.
 */
export async function bucketsFor(route: Route, facts: RequestFacts, config: Config, stores: RegionStores): Promise<Bucket[]> {
  const regionCount = allRegions(config).length;
  return Promise.all(
    route.limits.map(async (limit): Promise<Bucket> => {
      const global = limit.scope === "global";
      const store = global ? stores.home : stores.regional;
      if (!store) throw new StoreError("unreachable", `no Upstash URL/token for region "${global ? config.home_region : stores.region}" nor for the home region`);
      const identity = identify(limit.key, facts) + (global ? "" : `@${stores.region}`);
      const bucket: Bucket = { limit, store, key: bucketKey(config.key_prefix, route.name, limit.name, await hashIdentifier(identity)) };
      if (limit.scope === "split") bucket.split = { ...splitKeys(config.key_prefix, route.name, limit.name, stores.region), start: equalShare(limit.rate, limit.burst, regionCount) };
      return bucket;
    }),
  );
}

/** Where a region's share of a split limit, and the demand it saw, are kept (in that region's Redis). */
export function splitKeys(prefix: string, route: string, limit: string, region: string): { shareKey: string; demandKey: string } {
  const base = `${prefix}:${route}:${limit}`;
  return { shareKey: `${base}:share:${region}`, demandKey: `${base}:demand:${region}` };
}
