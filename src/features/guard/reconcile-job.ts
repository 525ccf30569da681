/*
 * A queued job whose delivery's outcome is unknown (the connection broke after it was sent, no
 * answer even late) is reconciled with the origin before anything else is decided for it, on a
 * route with `idempotency.reconcile` (docs/idempotency-and-sessions.md, Reconciliation): the
 * origin's word becomes the delivery's outcome. 2xx: the call happened, and its answer is the
 * job's (stored for replays, the job delivered); 404: it never happened, so the job is retried as
 * after a failure that did not act (before any redelivery); anything else: unknown, as before.
 */
import type { Route } from "../../config/index.js";
import type { FieldCounter } from "../../metrics/idempotency.js";
import type { OriginReply } from "../../origin/forward.js";
import { fromBase64 } from "../../util/base64.js";
import { discardBody, logError } from "../../util/log.js";
import { applyAnswer, askOrigin, type OriginSays } from "./idempotency/reconcile.js";
import { claimRef, type JobGuardPlace, type JobGuards } from "./job-claim.js";

/** Where the consumer asks: its guards' place, where outcomes are counted, and the route's origin. */
export interface JobReconcilePlace extends JobGuardPlace {
  metrics: FieldCounter;
  origin: URL | undefined;
}

/**
 * The delivery's reply as the origin's reconcile endpoint tells it: an `answered` reply with the
 * call's answer (found), an `unreachable` one (absent: the origin says it never acted), or `reply`
 * itself (no reconcile on the route, no answer, or the claim no longer the job's).
 */
export async function reconciledDelivery(
  m: JobGuards,
  route: Route,
  place: JobReconcilePlace,
  reply: OriginReply,
): Promise<OriginReply> {
  const settings = route.idempotency;
  const key = m.sluiceHeaders?.["idempotency-key"];
  const fence = m.sluiceHeaders?.["sluice-fencing-token"];
  const ref = claimRef(m, place);
  if (!settings?.reconcile || !m.claim || !ref || key === undefined || fence === undefined) return reply;
  const trail = ref.trail && { ...ref.trail, metrics: place.metrics };
  const says = await askOrigin(
    { template: settings.reconcile, origin: place.origin, key, fence, trace: trail?.trace },
    { timeoutMs: settings.reconcile_timeout, maxBody: settings.max_body },
  );
  if (says === undefined) return reply;
  try {
    if ((await applyAnswer({ ...ref, trail }, fence, says, settings, m.claim.owner)) === "stale") return reply;
  } catch (e) {
    logError("reconcile_apply_failed", e, { route: route.name, job: m.id });
    return reply;
  }
  if (says.kind === "unknown") return reply;
  await discardBody(reply.response.body);
  return { ...reply, outcome: says.kind === "found" ? "answered" : "unreachable", response: answerOf(says, reply) };
}

/** The call's answer as the origin told it (found), or the failed delivery's own response (absent). */
function answerOf(says: Exclude<OriginSays, { kind: "unknown" }>, reply: OriginReply): Response {
  if (says.kind === "absent") return new Response(null, { status: 502, headers: reply.response.headers });
  // a body the cap left out is not replayed: the record says so (stored 0), and the job's status has the status
  return new Response(says.body ? fromBase64(says.body) : null, { status: says.status, headers: says.headers });
}
