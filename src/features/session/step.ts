import { publicDecision, type Scope, type Step } from "../../context.js";
import { holdSession, sluiceHeadersOf } from "./guard.js";
import { coordinated, sessionPlace } from "../idempotency/side-effect.js";
import { LATE_ANSWER_MS, outcomeUnknown } from "../../origin/forward.js";
import { discardBody } from "../../util/log.js";

/**
 * One side-effecting call per session at a time: takes the session's lock before the request goes
 * on (a busy session is a 409 problem), tells the origin the grant's fencing token, renews the
 * lock while the call runs, and gives it back once the call's outcome is known: when the origin
 * answered, or, past `origin_timeout`, when its late answer came. A 504 is not the end of the
 * call: the origin may still be working on it. A call whose outcome stays unknown (a connection
 * broken after the request was sent, an interim 1xx only, no late answer within its wait) may
 * still be running at the origin: its lock is not given back, only no longer renewed, so the
 * session's next call waits out the lease.
 */
export const sessionStep: Step = async (c, scope, next) => {
  const route = scope.route;
  const settings = route?.session;
  if (!route || !settings?.methods.includes(scope.method)) return next();
  const held = await coordinated(() => holdSession(settings, scope.facts, sessionPlace(scope, route), scope.defer));
  if (held.kind === "none") return next();
  const granted = sluiceHeadersOf(scope.sluiceHeaders, held.headers);
  for (const k of Object.keys(scope.sluiceHeaders)) delete scope.sluiceHeaders[k];
  Object.assign(scope.sluiceHeaders, granted);
  c.set("sluice", publicDecision(scope));
  const ownsLateAnswer = awaitLateAnswer(scope);
  // nothing went out (sluice stopped it, or it threw before): the outcome is known
  let known: boolean | Promise<boolean> = true;
  const settle = (k: boolean) => (k ? held.release() : held.letLapse());
  try {
    await next();
    known = outcomeKnown(scope, ownsLateAnswer);
  } finally {
    if (typeof known === "boolean") await settle(known);
    else scope.defer(known.then(settle));
  }
};

/**
 * Past `origin_timeout` the origin's request is kept, not aborted, so that the lock is held until
 * its answer: an idempotency claim asked for that already (and reads the answer); otherwise this
 * step asks, and drops the answer's body itself (true).
 */
function awaitLateAnswer(scope: Scope): boolean {
  if (!scope.target || scope.target.lateAnswerMs) return false;
  scope.target = { ...scope.target, lateAnswerMs: LATE_ANSWER_MS };
  return true;
}

/**
 * Whether the call's outcome is known: every reply the origins gave (the main origin's, the divert
 * origin's after failover) is an answer, or a request never sent; a timeout's once its late answer
 * came (a promise, then; the answers' bodies dropped when they are this step's). No reply at all
 * (an app's handler, or sluice stopped the request): known.
 */
function outcomeKnown(scope: Scope, owned: boolean): boolean | Promise<boolean> {
  const replies = [scope.reply, scope.diverted].filter((r) => r !== undefined);
  const pending = replies.flatMap((r) => (r.late ? [r.late] : []));
  const now = replies.every((r) => r.late !== undefined || !outcomeUnknown(r));
  if (pending.length === 0) return now;
  const late = pending.map((l) => l.then(async (res) => (owned && (await discardBody(res?.body)), res !== undefined)));
  return Promise.all(late).then((answered) => now && answered.every(Boolean));
}
