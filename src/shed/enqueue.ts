import type { Config, Route } from "../config/index.js";
import type { Env } from "../env.js";
import type { Exchange } from "../gateway.js";
import { offPathStore } from "../region/index.js";
import { JOB_ID, readJob, writeJob } from "./jobs.js";
import { problem } from "./problem.js";
import { accepted, toJob, type JobMessage } from "./queue.js";
import { claimSideEffect } from "../side-effect.js";

/**
 * Sends a shed request to the queue and answers 202 with where its status can be read. A
 * side-effecting request takes its guards first, exactly as if it went to the origin now: its
 * idempotency key is claimed (held until the consumer settles it) and its session lock taken, and
 * both travel with the job, so a duplicate gets 409 or the replay, never a second job. The
 * `queued` status is written after the response (`ctx.waitUntil`), and only if no later status
 * landed first.
 */
export async function enqueue(x: Exchange, retryAfterMs: number): Promise<{ response: Response; decision: "queued" | "replay" | "reject" }> {
  const queue = x.env.SLUICE_QUEUE;
  if (!queue) return { decision: "reject", response: problem({ status: 500, title: "Queue not bound", detail: "this route sheds to a queue but the Worker has no SLUICE_QUEUE binding" }) };
  const effect = await claimSideEffect(x, queuedClaimLease(x.route));
  if (effect.kind === "answer") return { response: effect.response, decision: effect.decision };
  const job = await toJob(effect.request, x.route, x.facts, x.region, x.target.path);
  if (!job.ok) {
    await effect.abandon();
    return { response: job.response, decision: "reject" };
  }
  const message: JobMessage = { ...job.message, claim: effect.claim, session: effect.session, sluiceHeaders: effect.sluiceHeaders };
  try {
    await queue.send(message, { contentType: "json", delaySeconds: Math.min(60, Math.max(0, Math.ceil(retryAfterMs / 1000))) });
  } catch (e) {
    await effect.abandon();
    throw e;
  }
  const home = offPathStore(x.env, x.config);
  if (home) {
    const status = { id: message.id, status: "queued" as const, route: x.route.name, failures: 0, updated_at: new Date().toISOString() };
    x.defer(writeJob(home, x.config.key_prefix, status, x.route.queue.status_ttl, true).catch(() => undefined));
  }
  return { response: accepted(message.id, retryAfterMs), decision: "queued" };
}

/**
 * How long a queued request holds its idempotency claim: until its status expires (a job is not
 * delivered after that), and never past the record's own lifetime. The consumer settles it sooner.
 */
function queuedClaimLease(route: Route): number | undefined {
  return route.idempotency ? Math.min(route.queue.status_ttl, route.idempotency.ttl - 1) : undefined;
}

/** `GET /__sluice-jobs/{id}`: the status of a queued request. The id is its own capability. */
export async function jobStatusResponse(env: Env, config: Config, id: string): Promise<Response> {
  if (!JOB_ID.test(id)) return problem({ status: 404, title: "No such job", detail: "not a job id sluice issued" });
  const home = offPathStore(env, config);
  const job = home ? await readJob(home, config.key_prefix, id).catch(() => null) : null;
  if (job === null) return problem({ status: 503, title: "Job status unavailable", detail: "the job store could not be reached", headers: { "Retry-After": "1" } });
  if (!job) return problem({ status: 404, title: "No such job", detail: "unknown or expired job id" });
  return new Response(JSON.stringify(job), { headers: { "content-type": "application/json", "cache-control": "no-store" } });
}
