import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { Scope } from "../context.js";
import { Problem, problem } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";
import { logError } from "../util/log.js";

/** The response to an error thrown in a pipeline; throws the error on when it is not sluice's to answer. */
export type ErrorAnswer = (err: Error, c: Context, scope: Scope | undefined) => Response;

/**
 * The gateway's answer: a problem is answered as itself; anything else that throws becomes a 500
 * problem (still stamped with the decision headers), never a bare 500. Types take the
 * configuration's `problem_base` once a scope exists (before it, the configuration may be the problem).
 */
export const answerEveryError: ErrorAnswer = (err, _c, scope) => {
  const base = scope?.config.problem_base;
  if (err instanceof Problem) return err.getResponse(base);
  if (err instanceof HTTPException) return err.getResponse();
  logError("unhandled", err);
  return problem({ type: PROBLEMS.internalError, detail: "sluice failed to handle this request" }, base);
};

/**
 * A middleware's answer in an app: its own refusals (problems) replace the response whole; any
 * other exception is the app's (its handler's), thrown on to the app's error handler.
 */
export const answerOwnProblems: ErrorAnswer = (err, c, scope) => {
  if (!(err instanceof Problem)) throw err;
  c.res = undefined;
  return err.getResponse(scope?.config.problem_base);
};
