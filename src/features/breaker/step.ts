import type { Context } from "hono";
import type { Route } from "../../config/index.js";
import { ownResult, type Scope, type SluiceEnv, type Step } from "../../context.js";
import { Breakers, SHARE_TIMEOUT_MS, type BreakerShare } from "./breakers.js";
import { Problem } from "../../problem.js";
import { originFailed } from "../../origin/forward.js";
import { shedWithoutOrigin } from "../shedding/step.js";
import { divertsOn } from "../shedding/failover.js";
import { breakerKey } from "../../store/layout.js";

/**
 * The route's circuit breaker: while it is open the origin gets nothing and the client gets the
 * divert origin's answer (`divert_on` names "breaker"), the last good copy, the static fallback
 * page, or a 503. After the response, the origin's outcome
 * (its reply in the gateway; the handler's response in an app) is recorded against the client.
 */
export const breakerStep: Step = async (c, scope, next) => {
  const route = scope.route;
  // the operator's divert switch sends the request elsewhere: the origin's breaker has no say
  if (!route?.breaker || ownResult(c, scope, "sluiceSwitch")?.mode === "divert") return next();
  const share = shareOf(scope, route);
  const breaker = breakersOf(scope).of(route, share);
  const admission = breaker?.admit(Date.now());
  if (admission && !admission.pass) {
    if (!failsOver(scope, route)) return breakerOpen(c, scope, admission.retryAfterMs);
    // the divert origin answers in the origin's place, after the limits and guards (src/pipeline/forward-to-origin.ts)
    scope.failover = "breaker";
    if (scope.meta) scope.meta.limit = "breaker";
    return next();
  }
  const started = Date.now();
  await next();
  const probe = admission?.pass ? admission.probe : false;
  const outcome = originOutcome(c, scope, started);
  if (outcome) breakersOf(scope).record(route, scope.facts.ip, { ...outcome, probe }, share);
  // a probe the origin never saw (the limits refused it, a replay answered it) tells nothing
  else if (probe) breaker?.probeUnused();
};

/** The isolate's breakers, made on first use: they follow the change counters decisions report. */
function breakersOf(scope: Scope): Breakers {
  return scope.runtime.own(Breakers, () => new Breakers(scope.runtime.versions));
}

/**
 * How the origin did for this request: its reply in the gateway; in an app, the handler is the
 * origin (its 5xx, or its exception, is the failure). Nothing when the origin was not asked: a
 * problem, a fallback copy, the queue, a divert or a replay answered instead.
 */
function originOutcome(c: Context, scope: Scope, started: number): { ok: boolean; latencyMs: number } | undefined {
  if (scope.reply) return { ok: !originFailed(scope.reply), latencyMs: scope.reply.latencyMs };
  if (scope.target || c.error instanceof Problem) return undefined;
  if (!["allow", "shadow", "degraded"].includes(scope.decision)) return undefined;
  return { ok: c.res.status < 500, latencyMs: Date.now() - started };
}

/**
 * Whether an open breaker sends the request to the route's divert origin: the route names
 * "breaker" in `divert_on`, and the gateway forwards (in an app the handler is the origin).
 */
function failsOver(scope: Scope, route: Route): boolean {
  return scope.target !== undefined && divertsOn(route, "breaker");
}

/** The breaker is open: the origin gets nothing; the shedder answers (a copy, the static page, or a 503). */
function breakerOpen(c: Context<SluiceEnv>, scope: Scope, retryAfterMs: number): Promise<Response> {
  if (scope.meta) scope.meta.limit = "breaker";
  return shedWithoutOrigin(c, scope, { kind: "breaker", retryAfterMs });
}

function shareOf(scope: Scope, route: Route): BreakerShare {
  return {
    store: scope.stores.fixed(SHARE_TIMEOUT_MS, scope.region),
    key: breakerKey(scope.config.key_prefix, route.name),
    defer: scope.defer,
  };
}
