import type { Config } from "../config/index.js";
import type { Env } from "../env.js";
import type { Exchange } from "../gateway.js";
import { offPathStore } from "../region/index.js";
import { JOB_ID, readJob, writeJob } from "./jobs.js";
import { problem } from "./problem.js";
import { accepted, toJob } from "./queue.js";

/**
 * Sends a shed request to the queue and answers 202 with where its status can be read. The
 * `queued` status is written after the response (`ctx.waitUntil`), and only if no later status
 * landed first.
 */
export async function enqueue(x: Exchange, retryAfterMs: number): Promise<Response> {
  const queue = x.env.SLUICE_QUEUE;
  if (!queue) return problem({ status: 500, title: "Queue not bound", detail: "this route sheds to a queue but the Worker has no SLUICE_QUEUE binding" });
  const job = await toJob(x.request, x.route, x.facts, x.region, x.target.path);
  if (!job.ok) return job.response;
  await queue.send(job.message, { contentType: "json", delaySeconds: Math.min(60, Math.max(0, Math.ceil(retryAfterMs / 1000))) });
  const home = offPathStore(x.env, x.config);
  if (home) {
    const status = { id: job.message.id, status: "queued" as const, route: x.route.name, failures: 0, updated_at: new Date().toISOString() };
    x.defer(writeJob(home, x.config.key_prefix, status, x.route.queue.status_ttl, true).catch(() => undefined));
  }
  return accepted(job.message.id, retryAfterMs);
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
