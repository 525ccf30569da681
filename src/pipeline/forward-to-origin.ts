import type { Context } from "hono";
import { ownResult, type SluiceEnv } from "../context.js";
import { sendToOrigin } from "../origin/forward.js";
import { failover, failoverReason, spareRequest } from "../features/shedding/failover.js";
import { discardBody } from "../util/log.js";

/**
 * The gateway's final handler: the request goes to the origin, body streamed both ways, with what
 * the steps want the origin told (fencing token, Idempotency-Key, session). The reply stays on the
 * scope for the steps' work after the response (idempotency, breaker, fallback copies). A route
 * that fails over sends the request to its divert origin instead when the breaker is open, or
 * after the origin failed it when sending it again is safe (src/features/shedding/failover.ts).
 */
export async function forwardToOrigin(c: Context<SluiceEnv>): Promise<Response> {
  const scope = c.get("sluiceScope");
  if (!scope.target) throw new Error("forwardToOrigin without an origin");
  // what this mount's guards hold (never a guard of another mount on the request)
  const guards = ownResult(c, scope, "sluiceGuards");
  if (scope.failover) return failover(scope, c.req.raw, scope.failover, guards);
  const spare = spareRequest(c.req.raw, { route: scope.route, guards });
  const started = Date.now();
  const { sluiceHeaders = {}, lateAnswerMs } = guards ?? {};
  const reply = await sendToOrigin(c.req.raw, { ...scope.target, sluiceHeaders, lateAnswerMs });
  // the origin's own time: from its request fully sent (a slow upload is the client's) to its answer
  const sentAt = Math.max(started, Math.min(reply.bodySentAt ?? started, Date.now()));
  scope.reply = { ...reply, latencyMs: Date.now() - sentAt };
  const reason = spare && failoverReason({ route: scope.route, method: scope.method, guards }, reply);
  if (!spare || !reason) {
    // an unused copy of a kept body would hold its bytes until collected
    if (spare && spare !== c.req.raw) await discardBody(spare.body);
    return reply.response;
  }
  await discardBody(reply.response.body);
  return failover(scope, spare, reason, guards);
}
