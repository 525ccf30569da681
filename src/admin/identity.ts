import type { Config, Limit, Route } from "../config/index.js";
import type { Env } from "../env.js";
import { bucketKey } from "../keys/hash.js";
import { bucketHash } from "../limiter/buckets.js";
import { identify, type RequestFacts } from "../keys/identify.js";
import { offPathStore } from "../region/index.js";
import type { Store } from "../store/redis.js";

/**
 * The facts an operator names a client by, as query parameters spelled like key parts:
 * `ip=203.0.113.9`, `path=/api/x`, `header:x-api-key=k1`, `query:user=7`, `cookie:sid=s`, `jwt:sub=u1`.
 */
export function factsFromParams(params: URLSearchParams): RequestFacts {
  const headers = new Headers();
  const url = new URL("https://admin.sluice/");
  const claims: Record<string, unknown> = {};
  const cookies: string[] = [];
  for (const [k, v] of params) {
    const [source, name] = [k.slice(0, k.indexOf(":")), k.slice(k.indexOf(":") + 1)];
    if (source === "header") headers.set(name, v);
    else if (source === "query") url.searchParams.set(name, v);
    else if (source === "cookie") cookies.push(`${name}=${v}`);
    else if (source === "jwt") claims[name] = v;
  }
  if (cookies.length) headers.set("cookie", cookies.join("; "));
  return { ip: params.get("ip") ?? "unknown", matchPath: params.get("path") ?? "/", headers, url, claims };
}

export interface BucketAddress {
  route: Route;
  limit: Limit;
  region: string;
  store: Store;
  key: string;
  hash: string;
}

/** The bucket an operator means: route, limit, region (default home) and the client's key parts. */
export async function bucketAddress(config: Config, env: Env, routeName: string, limitName: string, params: URLSearchParams): Promise<BucketAddress | string> {
  const route = config.routes.find((r) => r.name === routeName);
  const limit = route?.limits.find((l) => l.name === limitName);
  if (!route || !limit) return `no limit "${limitName}" in a route "${routeName}"`;
  const region = params.get("region") ?? config.home_region;
  const target = limit.scope === "global" ? config.home_region : region;
  const store = offPathStore(env, config, target);
  if (!store) return `no Redis for region "${target}"`;
  const identity = identify(limit.key, factsFromParams(params), "ip");
  if (identity.kind !== "id") return "the identity is incomplete";
  const hash = await bucketHash(limit, identity.id, region);
  return { route, limit, region, store, hash, key: bucketKey(config.key_prefix, route.name, limit.name, hash) };
}
