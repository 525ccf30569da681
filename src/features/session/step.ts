import { publicDecision, type Step } from "../../context.js";
import { holdSession, sluiceHeadersOf } from "./guard.js";
import { coordinated, sessionPlace } from "../idempotency/side-effect.js";

/**
 * One side-effecting call per session at a time: takes the session's lock before the request goes
 * on (a busy session is a 409 problem), tells the origin the grant's fencing token, and gives the
 * lock back once the response has started.
 */
export const sessionStep: Step = async (c, scope, next) => {
  const route = scope.route;
  const settings = route?.session;
  if (!route || !settings?.methods.includes(scope.method)) return next();
  const held = await coordinated(() => holdSession(settings, scope.facts, sessionPlace(scope, route)));
  if (held.kind === "none") return next();
  const granted = sluiceHeadersOf(scope.sluiceHeaders, held.headers);
  for (const k of Object.keys(scope.sluiceHeaders)) delete scope.sluiceHeaders[k];
  Object.assign(scope.sluiceHeaders, granted);
  c.set("sluice", publicDecision(scope));
  try {
    await next();
  } finally {
    await held.release();
  }
};
