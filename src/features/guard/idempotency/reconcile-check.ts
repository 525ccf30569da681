import { fieldError, type RouteCheck } from "../../../config/load.js";
import { reconcileHostProblem } from "./reconcile-url.js";

/**
 * A route's `idempotency.reconcile` checked at load: a reconcile answer is trusted only from the
 * origin's host or one the route allows. Given to the configuration by what composes idempotency
 * (the gateway's `loadConfig`, `idempotency()`), so a Worker without idempotency carries none of it.
 */
export const checkReconcileHost: RouteCheck = (r, ri, originUrl, written) => {
  const template = r.idempotency?.reconcile;
  const problem = template === undefined ? undefined : reconcileHostProblem(template, originUrl, r.queue.callbacks);
  if (problem) throw fieldError(["SLUICE", "routes", ri, "idempotency", "reconcile"], problem, written);
};
