import type { Scope } from "../context.js";
import type { ProblemInit } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";
import { missingRedisVariable } from "../region/index.js";
import { log } from "../util/log.js";

/** The variables each isolate (its `Runtime`) has logged as missing: a misconfiguration is told once, not per request. */
const logged = new WeakMap<object, Set<string>>();

/** True the first time an isolate meets `missing`. */
function firstTime(runtime: object, missing: string): boolean {
  const seen = logged.get(runtime) ?? new Set<string>();
  logged.set(runtime, seen);
  return seen.has(missing) ? false : Boolean(seen.add(missing));
}

/**
 * A guarded request needs a Redis for its region and for the home region. Missing configuration
 * is not an outage: `on_store_error` ("local", "open") would quietly limit each isolate alone, so
 * it is a `500` problem naming the variable, logged once per isolate. Undefined: nothing missing.
 */
export function redisNotConfigured(scope: Scope): ProblemInit | undefined {
  if (!scope.route) return undefined;
  if (scope.stores.decision(scope.region) && scope.stores.home()) return undefined;
  const home = scope.config.home_region;
  const missing =
    missingRedisVariable(scope.env, scope.region, home) ??
    missingRedisVariable(scope.env, home, home) ??
    "UPSTASH_REDIS_REST_URL";
  if (firstTime(scope.runtime, missing)) {
    log("redis_not_configured", { missing, region: scope.region, route: scope.route.name });
  }
  return {
    type: PROBLEMS.redisNotConfigured,
    detail: `No Redis is configured for this route: set ${missing}.`,
    extensions: { missing },
  };
}
