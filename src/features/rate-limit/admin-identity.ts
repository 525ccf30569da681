import type { Config, Limit, Route } from "../../config/index.js";
import type { KeyHash } from "../../identity/hash.js";
import { identify, type RequestFacts } from "../../identity/identify.js";
import { bucketHash } from "./decision/buckets.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import type { Stores } from "../../region/index.js";
import { bucketKey, overrideField } from "../../store/layout.js";
import type { Store } from "../../store/redis.js";
import { badRequest } from "../../operator/validate.js";

/**
 * The facts an operator names a client by, as query parameters spelled like key parts:
 * `ip=203.0.113.9`, `path=/api/x`, `header:x-api-key=k1`, `query:user=7`, `cookie:sid=s`, `jwt:sub=u1`.
 */
export function factsFromParams(params: URLSearchParams): RequestFacts {
  const headers = new Headers();
  const url = new URL("https://admin.sluice/");
  // own members only, whatever the name (`jwt:__proto__` is a claim like any other)
  const claims: Array<[string, string]> = [];
  const cookies: string[] = [];
  for (const [k, v] of params) {
    const [source, name] = [k.slice(0, k.indexOf(":")), k.slice(k.indexOf(":") + 1)];
    if (source === "header") headers.set(name, v);
    else if (source === "query") url.searchParams.set(name, v);
    else if (source === "cookie") cookies.push(`${name}=${v}`);
    else if (source === "jwt") claims.push([name, v]);
  }
  if (cookies.length) headers.set("cookie", cookies.join("; "));
  const facts = { ip: params.get("ip") ?? "unknown", matchPath: params.get("path") ?? "/", headers, url };
  return { ...facts, claims: Object.fromEntries(claims) };
}

/** A configured limit by its route's and its own name (as configured: names are case-sensitive). */
export function findLimit(
  config: Config,
  routeName: string,
  limitName: string,
): { route: Route; limit: Limit } | undefined {
  const route = config.routes.find((r) => r.name === routeName);
  const limit = route?.limits.find((l) => l.name === limitName);
  return route && limit ? { route, limit } : undefined;
}

export interface BucketAddress {
  route: Route;
  limit: Limit;
  region: string;
  store: Store;
  key: string;
  hash: KeyHash;
}

/**
 * The bucket an operator means: route, limit, region (default home) and the client's key parts.
 * Throws a 404 problem when there is no such bucket to address.
 */
export async function bucketAddress(
  config: Config,
  stores: Stores,
  routeName: string,
  limitName: string,
  params: URLSearchParams,
): Promise<BucketAddress> {
  const found = findLimit(config, routeName, limitName);
  if (!found) throw noBucket(`no limit "${limitName}" in a route "${routeName}"`);
  const { route, limit } = found;
  const region = params.get("region") ?? config.home_region;
  const target = limit.scope === "global" ? config.home_region : region;
  const store = stores.offPath(target);
  if (!store) throw noBucket(`no Redis for region "${target}"`);
  const identity = identify(limit.key, factsFromParams(params), "ip");
  if (identity.kind !== "id") throw noBucket("the identity is incomplete");
  const hash = await bucketHash(limit, identity.id, region);
  return { route, limit, region, store, hash, key: bucketKey(config.key_prefix, route.name, limit.name, hash) };
}

function noBucket(detail: string): Problem {
  return new Problem({ type: PROBLEMS.noSuchBucket, detail });
}

/**
 * The field an override is kept under in its route's hash: `{limit}:*` for everybody,
 * `{limit}:{bucket hash}` for one client (named by its key parts, in `region`, default home).
 * A key part the identity leaves out is the client's `ip`, as a request without it would be.
 */
export async function overrideFieldFor(
  config: Config,
  limit: Limit,
  identity: Record<string, string> | undefined,
  region: string | undefined,
): Promise<string> {
  if (!identity) return overrideField(limit.name);
  const id = identify(limit.key, factsFromParams(new URLSearchParams(identity)), "ip");
  // with `missing = "ip"` every identity is complete; the check is for the type
  if (id.kind !== "id") throw badRequest("the identity is incomplete");
  return overrideField(limit.name, await bucketHash(limit, id.id, region ?? config.home_region));
}
