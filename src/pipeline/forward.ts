import type { Context } from "hono";
import type { SluiceEnv } from "../context.js";
import { sendToOrigin } from "../origin/forward.js";

/**
 * The gateway's final handler: the request goes to the origin, body streamed both ways, with what
 * the steps want the origin told (fencing token, Idempotency-Key, session). The reply stays on the
 * scope for the steps' work after the response (idempotency, breaker, fallback copies).
 */
export async function forwardToOrigin(c: Context<SluiceEnv>): Promise<Response> {
  const scope = c.get("sluiceScope");
  if (!scope.target) throw new Error("forwardToOrigin without an origin");
  const started = Date.now();
  const reply = await sendToOrigin(c.req.raw, { ...scope.target, sluiceHeaders: scope.sluiceHeaders });
  // the origin's own time: from its request fully sent (a slow upload is the client's) to its answer
  const sentAt = Math.max(started, Math.min(reply.bodySentAt ?? started, Date.now()));
  scope.reply = { ...reply, latencyMs: Date.now() - sentAt };
  return reply.response;
}
