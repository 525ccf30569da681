import type { Scope } from "../context.js";
import type { ProblemInit } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";
import { missingRedisVariable } from "../region/index.js";
import { Problem } from "../problem.js";
import type { StoreError } from "../store/deadline.js";
import { log, logFailure } from "../util/log.js";

/** What each isolate (its `Runtime`) has logged: a misconfiguration is told once, not per request. */
const logged = new WeakMap<object, Set<string>>();

/** Where a failure met before any scope (hence runtime) existed is remembered: this module's isolate. */
const NO_RUNTIME = {};

/** True the first time an isolate meets `what`. */
function firstTime(runtime: object, what: string): boolean {
  const seen = logged.get(runtime) ?? new Set<string>();
  logged.set(runtime, seen);
  return seen.has(what) ? false : Boolean(seen.add(what));
}

/**
 * A guarded request needs a Redis for its region and for the home region. Missing configuration
 * is not an outage: `on_store_error` ("local", "open") would quietly limit each isolate alone, so
 * it is a `500` problem naming the variable, logged once per isolate. Undefined: nothing missing.
 */
export function redisNotConfigured(
  scope: Pick<Scope, "route" | "stores" | "region" | "config" | "env" | "runtime">,
): ProblemInit | undefined {
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
    extensions: { missing, variable: missing },
  };
}

/**
 * A store the deployment misconfigured (the database refused the token, the URL cannot be a REST
 * endpoint: a `StoreError` "misconfigured"), answered as a missing variable is: the same `500`
 * problem naming the variable, never `on_store_error`'s quiet answer. The message (which names
 * the variable and carries no secret) is logged once per isolate.
 *
 * @example misconfiguredStore(e, scope) // 500 "… the database refused UPSTASH_REDIS_REST_TOKEN (HTTP 401) …"
 */
export function misconfiguredStore(e: StoreError, scope: Scope | undefined): Problem {
  const variable = e.variable ?? "UPSTASH_REDIS_REST_URL";
  if (firstTime(scope?.runtime ?? NO_RUNTIME, `${variable}\u0000${e.message}`)) {
    logFailure("redis_misconfigured", {
      variable,
      message: e.message,
      ...(scope ? { region: scope.region, route: scope.route?.name } : {}),
    });
  }
  return new Problem({
    type: PROBLEMS.redisNotConfigured,
    detail: `The Redis for this route is misconfigured: ${e.message}.`,
    extensions: { variable },
  });
}
