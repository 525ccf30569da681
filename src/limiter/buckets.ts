import type { Route } from "../config/index.js";
import { bucketKey, hashIdentifier } from "../keys/hash.js";
import { identify, type RequestFacts } from "../keys/identify.js";
import type { Bucket } from "./decide.js";

/** The bucket of each limit of `route` that this request falls into. */
export async function bucketsFor(route: Route, facts: RequestFacts, prefix: string): Promise<Bucket[]> {
  return Promise.all(
    route.limits.map(async (limit) => ({
      limit,
      key: bucketKey(prefix, route.name, limit.name, await hashIdentifier(identify(limit.key, facts))),
    })),
  );
}
