import type { Context } from "hono";
import { publicDecision, type Scope, type SluiceEnv, type Step } from "../../context.js";
import { guard } from "./guard.js";
import type { OriginReply } from "../../origin/forward.js";
import { Problem } from "../../problem.js";
import { callLifeMs, claimStores, claimSubject, coordinated } from "./side-effect.js";

/**
 * One side effect per key: claims the request's key before it goes on (a duplicate gets the
 * stored answer, or 409/422), tells the origin the claim's fencing token, and after the response
 * stores the answer for replays (or releases / holds the key when the origin failed).
 */
export const idempotencyStep: Step = async (c, scope, next) => {
  const route = scope.route;
  const settings = route?.idempotency;
  if (!route || !settings?.methods.includes(scope.method)) return next();
  const subject = claimSubject(scope, route, settings);
  const life = { lifeMs: callLifeMs(route) };
  const guarded = await coordinated(() => guard(c.req.raw, settings, subject, claimStores(scope), scope.defer, life));
  if (guarded.kind === "replay") {
    scope.decision = "replay";
    // for the limits' refund, in this mount or one further out (never the response's header)
    c.set("sluiceReplayed", true);
    return guarded.response;
  }
  // the key's body was read to fingerprint it: what goes on is the same bytes, kept (failover may resend them)
  if (guarded.request !== c.req.raw) scope.bodyKept = true;
  c.req.raw = guarded.request;
  Object.assign(scope.sluiceHeaders, guarded.sluiceHeaders);
  // a held claim must learn what the origin did: past origin_timeout its answer is still awaited
  if (scope.target && guarded.lateAnswerMs) scope.target = { ...scope.target, lateAnswerMs: guarded.lateAnswerMs };
  c.set("sluice", publicDecision(scope));
  const started = Date.now();
  await next();
  const reply = replyOf(c, scope, started);
  if (reply) c.res = await guarded.settle(reply);
  else await guarded.abandon();
};

/**
 * What the origin did: the gateway's reply (the divert origin's after failover), or in an app the handler's response (its exception
 * is a 5xx, an origin failure). Nothing when sluice itself stopped the request after the claim
 * (a busy session): the key is free again.
 */
function replyOf(
  c: Context<SluiceEnv>,
  scope: Scope,
  started: number,
): (OriginReply & { latencyMs: number }) | undefined {
  // failover (or the operator's divert switch, in an app too): the divert origin's answer is what
  // was done, and what duplicates replay
  if (scope.diverted) return scope.diverted;
  if (scope.target) return scope.reply;
  if (c.error instanceof Problem) return undefined;
  return { response: c.res, outcome: "answered", sent: c.req.raw.headers, latencyMs: Date.now() - started };
}
