import { publicDecision, type Scope, type Step } from "../../context.js";
import { holdSession, sluiceHeadersOf } from "./guard.js";
import { coordinated, sessionPlace } from "../idempotency/side-effect.js";
import { LATE_ANSWER_MS } from "../../origin/forward.js";
import { discardBody } from "../../util/log.js";

/**
 * One side-effecting call per session at a time: takes the session's lock before the request goes
 * on (a busy session is a 409 problem), tells the origin the grant's fencing token, renews the
 * lock while the call runs, and gives it back once the call's outcome is known: when the origin
 * answered, or, past `origin_timeout`, when its late answer came or was given up on. A 504 is not
 * the end of the call: the origin may still be working on it.
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
  let outcome: Promise<void> | undefined;
  try {
    await next();
    outcome = lateOutcome(scope, ownsLateAnswer);
  } finally {
    if (outcome) scope.defer(outcome.then(held.release));
    else await held.release();
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

/** When the origin's late answers are in (or given up on), if a reply has one coming; their bodies dropped when they are this step's. */
function lateOutcome(scope: Scope, owned: boolean): Promise<void> | undefined {
  const pending = [scope.reply?.late, scope.diverted?.late].filter((l) => l !== undefined);
  if (pending.length === 0) return undefined;
  return Promise.all(pending.map((l) => l.then((res) => (owned ? discardBody(res?.body) : undefined)))).then(
    () => undefined,
  );
}
