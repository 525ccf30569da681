import type { Context } from "hono";
import { ownResult, type DecisionMeta, type Scope, type SluiceEnv } from "../context.js";
import type { LimitSummary } from "../features/rate-limit/vars.js";
import { Problem, type DecisionHeader } from "../problem.js";
import { IdempotencyRefusal } from "../features/guard/idempotency/refusal.js";
import { log } from "../util/log.js";

/**
 * What the client is told: `Sluice-Decision` (from the problem that ended the request, else
 * from the steps), and `Sluice-Region`.
 */
export function decisionOf(c: Context<SluiceEnv>, scope: Scope | undefined): DecisionHeader {
  if (c.error instanceof Problem) return c.error.decision;
  // in the gateway an exception is sluice's own failure; in an app, the handler's: sluice let it through
  if (c.error && (!scope || scope.target)) return "reject";
  return scope?.decision ?? "allow";
}

/**
 * Stamps `Sluice-Decision` and `Sluice-Region` on the response, and, for a decision that counts
 * (a matched route, a deny-list refusal), counts it for the metrics once and writes one structured
 * log line for every decision but `allow`. Runs after every step, as the outermost middleware.
 */
export function stamp(c: Context<SluiceEnv>, scope: Scope | undefined): void {
  const decision = decisionOf(c, scope);
  const region = scope?.region ?? "unknown";
  if (scope?.meta && firstOfRoute(c, scope.meta.route)) record(c, scope, scope.meta, decision);
  let res = c.res;
  try {
    res.headers.set("Sluice-Decision", decision);
  } catch {
    // a response straight from fetch() has immutable headers: copy it once
    c.res = undefined;
    c.res = res = new Response(res.body, res);
    res.headers.set("Sluice-Decision", decision);
  }
  res.headers.set("Sluice-Region", region);
  c.set("sluiceStamped", true);
}

/** A duplicate refused for its key is counted in `sluice_idempotency_total` instead (src/metrics/idempotency.ts). */
export function countsAsDecision(c: Context<SluiceEnv>): boolean {
  return !(c.error instanceof IdempotencyRefusal);
}

/**
 * Counts (unless counted elsewhere: {@link countsAsDecision}), logs and flushes one decision: the
 * scope's, by its own mount's limits (never those of another sluice mount on the request).
 */
function record(c: Context<SluiceEnv>, scope: Scope, meta: DecisionMeta, decision: DecisionHeader): void {
  const { runtime, config, stores, defer, region } = scope;
  if (countsAsDecision(c)) countDecision(scope, meta, decision, ownResult(c, scope, "sluiceLimits"));
  if (decision !== "allow") {
    log("decision", {
      decision,
      route: meta.route,
      limit: meta.limit,
      region,
      id: meta.blockedId ?? null,
      ...(scope.trace ? { trace: scope.trace } : {}),
    });
  }
  runtime.metrics.flush(config, stores, defer);
}

function countDecision(
  scope: Scope,
  meta: DecisionMeta,
  decision: DecisionHeader,
  limits: LimitSummary | undefined,
): void {
  const { runtime, region } = scope;
  runtime.metrics.count(meta.route, meta.limit, decision, {
    rttMs: meta.rttMs,
    blockedId: meta.blockedId,
    label: meta.label,
    region,
    local: limits !== undefined && !limits.degraded && limits.withoutRedis,
    // fail open leaves no run (`degraded`); the isolate's own buckets leave a degraded one, refusals too
    storeFailed: decision === "degraded" || limits?.degraded === true,
  });
}

/**
 * What a pipeline does once its steps are done: stamps the decision. In an app, a sluice
 * middleware nearer the handler may have stamped it already (as it noted on the context; a
 * `Sluice-Decision` the handler's response carries is no sign of it): this one's decision is then
 * counted only (its route's metrics), the nearer one's headers stay.
 */
export function stampAndCount(c: Context<SluiceEnv>, scope: Scope | undefined, nested: boolean): void {
  if (!nested || c.get("sluiceStamped") !== true) stamp(c, scope);
  else if (scope?.meta && firstOfRoute(c, scope.meta.route)) record(c, scope, scope.meta, decisionOf(c, scope));
}

/**
 * Whether this is the first mount to record the request's decision for `route` (and notes that
 * it is). The mount nearest the handler settles first and knows the most (the limit that decided):
 * a mount further out under the same route name records nothing more.
 */
function firstOfRoute(c: Context<SluiceEnv>, route: string): boolean {
  const counted = c.get("sluiceCounted") ?? [];
  if (counted.includes(route)) return false;
  c.set("sluiceCounted", [...counted, route]);
  return true;
}
