import type { Route } from "../../config/index.js";
import type { RequestValue, Scope } from "../../context.js";
import { countDivert } from "../../metrics/diverts.js";
import { originFailed, type OriginReply } from "../../origin/forward.js";
import type { GuardsHeld } from "../guard/vars.js";
import { sendToDivert } from "./divert.js";
import type { DivertReason } from "./defaults.js";

/** A request as failover reads it: its route, and what its guards hold (the guards' result, `c.get("sluiceGuards")` of its own mount). */
type Guarded = Pick<Scope, "route"> & { guards?: GuardsHeld };

/** Methods the origin must not act on (RFC 9110 §9.2.1): running one twice changes nothing. */
const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/** Whether the route sends requests to its divert origin for `reason` (it has one, and names it). */
export function divertsOn(route: Route, reason: DivertReason): boolean {
  return route.divertUrl !== undefined && route.divertOn.includes(reason);
}

/**
 * A copy of the request to send to the divert origin should the main origin fail it, or nothing
 * when the route does not fail over on failures or the request could not be sent twice: its body
 * would be streamed to the origin and gone. Only a body sluice read whole (an idempotency key's
 * fingerprint, at most its cap) is kept; a request without one is sent again as it is.
 */
export function spareRequest(request: Request, guarded: Guarded): Request | undefined {
  const route = guarded.route;
  if (!route || !(divertsOn(route, "5xx") || divertsOn(route, "timeout"))) return undefined;
  if (request.method === "GET" || request.method === "HEAD" || request.body === null) return request;
  return guarded.guards?.bodyKept ? request.clone() : undefined;
}

/**
 * Why the main origin's reply sends the request to the divert origin, or nothing. The failure must
 * be one the route names (`5xx`: a 5xx answer or no connection; `timeout`: no answer within
 * `origin_timeout`), and sending the request again must be safe:
 * - never sent (`unreachable`): the origin certainly did not act;
 * - under an idempotency claim: only a 5xx the route trusts to mean "not done"
 *   (`on_origin_error = "release"`); a timeout or a broken connection leaves the outcome unknown;
 * - otherwise only a safe method (GET, HEAD, OPTIONS): a POST's 5xx or timeout may have acted.
 */
export function failoverReason(guarded: Guarded & Pick<Scope, "method">, reply: OriginReply): DivertReason | undefined {
  const route = guarded.route;
  const reason = reply.outcome === "timeout" ? "timeout" : originFailed(reply) ? "5xx" : undefined;
  if (!route || !reason || !divertsOn(route, reason)) return undefined;
  if (reply.outcome === "unreachable") return reason;
  if (guarded.guards?.sluiceHeaders["idempotency-key"] !== undefined)
    return reply.outcome === "answered" && route.idempotency?.on_origin_error === "release" ? reason : undefined;
  return SAFE_METHODS.has(guarded.method) ? reason : undefined;
}

/**
 * Sends the request to the route's divert origin, once, with the guards it holds (fencing token,
 * Idempotency-Key, session), for a failure `reason` or the operator's `divert` switch (`mode`): its answer, whatever it is, is the client's (`Sluice-Decision:
 * diverted`); a divert origin that fails too is not diverted again. The main origin's reply, if
 * it was asked, stays in `scope.reply` (its breaker and adaptive limit watch the main origin).
 * `held`: what the request's guards hold, from its own mount.
 */
export async function failover(
  scope: RequestValue & Pick<Scope, "route" | "diverted" | "decision">,
  request: Request,
  reason: DivertReason | "mode",
  held: GuardsHeld | undefined,
): Promise<Response> {
  const route = scope.route;
  const divertUrl = route?.divertUrl;
  if (!route || !divertUrl) throw new Error("failover on a route without a divert_url");
  // what the main origin's request carried: the guards' headers, a held claim's wait for a late answer
  const guards = {
    sluiceHeaders: held?.sluiceHeaders ?? {},
    lateAnswerMs: held?.lateAnswerMs,
    problemBase: scope.target?.problemBase,
  };
  const started = Date.now();
  const reply = await sendToDivert(request, scope, { ...route, divertUrl }, guards);
  scope.diverted = { ...reply, latencyMs: Date.now() - started };
  scope.decision = "diverted";
  countDivert(scope.runtime.metrics, route.name, reason);
  return reply.response;
}
