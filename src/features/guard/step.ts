import type { Context } from "hono";
import { publish, type Scope, type SluiceEnv, type Step } from "../../context.js";
import type { Route } from "../../config/index.js";
import { Problem } from "../../problem.js";
import { claim, type CallOutcome } from "./core.js";
import { replayedResponse } from "./idempotency/key-claim.js";
import { callLifeMs } from "./place.js";
import { readGuardedRequest, traceOf } from "./scope-subject.js";

/**
 * The guard core's Hono adapter, for the gateway's pipeline and for `idempotency()` and
 * `session()`: one side effect per key, one call per session at a time. Claims the request's key
 * (a duplicate gets the stored answer, or 409/422) and takes its session's lock (a busy session is
 * a 409) before the request goes on, tells the origin the fencing token, and once the origin
 * replied settles both with what it did: the answer stored for replays (or the key released or
 * held when the origin failed), the lock given back when the call's outcome is known (past
 * `origin_timeout`, when its late answer came) and left to run out its lease when it is not.
 */
export const guardStep: Step = async (c, scope, next) => {
  const route = scope.route;
  if (!route || !guarded(route, scope.method)) return next();
  const read = await readGuardedRequest(c.req.raw, { value: scope, route, trace: traceOf(scope) });
  const guarding = await claim(read.subject, read.place, { lifeMs: callLifeMs(route) });
  if (guarding.kind === "replay") {
    scope.decision = "replay";
    // for the limits' refund, in this mount or one further out (never the response's header)
    c.set("sluiceReplayed", true);
    return replayedResponse(guarding.answer);
  }
  const held = guarding.claim;
  // the key's body was read to fingerprint it: what goes on is the same bytes, kept (failover may resend them)
  const bodyKept = read.request !== c.req.raw;
  c.req.raw = read.request;
  // a held guard must learn what the origin did: past origin_timeout its answer is still awaited
  const lateAnswerMs = scope.target && held.lateAnswerMs ? held.lateAnswerMs : undefined;
  publish(c, scope, "sluiceGuards", { sluiceHeaders: { ...held.sluiceHeaders }, lateAnswerMs, bodyKept });
  const started = Date.now();
  await next();
  const outcome = outcomeOf(c, scope, started);
  if (!outcome) return held.abandon("stopped by sluice");
  const response = await held.settleWith(outcome);
  // an idempotent method's response is the settled one (its body teed to store it); a lock changes none
  if (route.idempotency?.methods.includes(scope.method)) c.res = response;
};

/** Whether the route guards requests of this method: with an idempotency key, or a session lock. */
function guarded(route: Route, method: string): boolean {
  return Boolean(route.idempotency?.methods.includes(method) || route.session?.methods.includes(method));
}

/**
 * What the origin did: the gateway's reply (the divert origin's after failover, the main origin's
 * beside it), or in an app the handler's response (its exception is a 5xx, an origin failure).
 * Nothing when sluice itself stopped the request after the claim (a refusal further in): the
 * guards are given back.
 */
function outcomeOf(c: Context<SluiceEnv>, scope: Scope, started: number): CallOutcome | undefined {
  // failover (or the operator's divert switch, in an app too): the divert origin's answer is what
  // was done, and what duplicates replay
  if (scope.diverted) return { reply: scope.diverted, failedOver: scope.reply };
  if (scope.target) return scope.reply && { reply: scope.reply };
  if (c.error instanceof Problem) return undefined;
  return { reply: { response: c.res, outcome: "answered", sent: c.req.raw.headers, latencyMs: Date.now() - started } };
}
