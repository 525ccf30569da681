import type { Context } from "hono";
import type { Config, Limit, Route } from "../../../config/index.js";
import type { RequestValue, Scope, SluiceEnv } from "../../../context.js";
import { Problem } from "../../../problem.js";
import { PROBLEMS } from "../../../problem-types.js";
import { claimSideEffect } from "../../guard/side-effect.js";
import { traceOf } from "../../guard/scope-subject.js";
import type { Store } from "../../../store/redis.js";
import { JOB_ID, readJob, writeJob } from "./jobs.js";
import { accepted, checkJobSize, JOBS_PATH, toJob, type JobMessage } from "./queue.js";
import { logError, orElse, settleQuietly } from "../../../util/log.js";
import { clientOf, enterQueue, leaveQueue, type CountedJob, type Full } from "./depth.js";
import type { LimitOutcome } from "../../rate-limit/types.js";
import { callbackOf } from "./callback.js";
import { jobGuardLease } from "../../guard/core.js";

/**
 * Why a shed request was not queued: the queue holds `max_depth` jobs, its client holds its
 * `max_per_client` of them, or the wait is past `max_age`.
 */
export type Overflow = Full | "age";

/** What the refusal that sends a request to the queue says: the limit that refused, and when it frees. */
export type Refused = Pick<LimitOutcome, "limit" | "retryAfterMs">;

/**
 * Sends a shed request to the queue and answers 202 with where its status can be read. A
 * side-effecting request takes its guards first, exactly as if it went to the origin now: its
 * idempotency key is claimed (held until the consumer settles it) and its session lock taken, and
 * both travel with the job, so a duplicate gets 409 or the replay, never a second job. The
 * `queued` status is written after the response (`ctx.waitUntil`), and only if no later status
 * landed first. A queue that is full, or a wait longer than `max_age`, is an overflow: the guards
 * are given back and the caller answers it.
 */
export async function enqueue(
  request: Request,
  scope: RequestValue & Pick<Scope, "route" | "trace">,
  refused: Refused,
): Promise<{ response: Response; decision: "queued" | "replay" } | { overflow: Overflow }> {
  const route = scope.route as Route;
  const queue = scope.env.SLUICE_QUEUE;
  if (!queue)
    throw new Problem({
      type: PROBLEMS.queueNotBound,
      detail: "this route sheds to a queue but the Worker has no SLUICE_QUEUE binding",
    });
  const { retryAfterMs } = refused;
  // the queue never delivers before the limit's retry-after: past max_age, the job would only be dropped
  if (route.queue.max_age !== undefined && retryAfterMs > route.queue.max_age) return { overflow: "age" };
  const callback = callbackOf(request, route);
  const effect = await claimSideEffect(request, { value: scope, route, trace: traceOf(scope) }, jobGuardLease(route));
  if ("kind" in effect) return { response: effect.response, decision: "replay" };
  // the job's id is its entry in its client's share: known before the place is taken
  const id = crypto.randomUUID();
  const place = await takePlace(scope, route, id, refused.limit);
  if (!place.admitted) {
    await effect.abandon();
    return { overflow: place.full ?? "depth" };
  }
  let message: JobMessage;
  try {
    message = await toJob(effect.request, route, scope.facts, scope.region, scope.forwardPath, scope.method);
    message = { ...message, id, claim: effect.claim, session: effect.session, sluiceHeaders: effect.sluiceHeaders };
    if (place.counted) message = { ...message, enqueuedAt: place.at, counted: true, ...sharing(place.job) };
    if (callback) message = { ...message, callback };
    checkJobSize(message);
    await queue.send(message, { contentType: "json", delaySeconds: sendDelaySeconds(retryAfterMs) });
  } catch (e) {
    await Promise.all([effect.abandon(), place.counted ? givePlaceBack(scope, route, place.at, place.job) : undefined]);
    throw e;
  }
  deferQueuedStatus(scope, route, message.id);
  return { response: accepted(message.id, retryAfterMs), decision: "queued" };
}

/** The job's first delay: the limit's retry-after, at most a minute (the consumer paces it further). */
function sendDelaySeconds(retryAfterMs: number): number {
  return Math.min(60, Math.max(0, Math.ceil(retryAfterMs / 1000)));
}

/** A place taken in the route's queue: whether it was (else which bound was full), counted or not, when, and as what job. */
interface Place {
  admitted: boolean;
  full?: Full;
  counted: boolean;
  at: number;
  job: CountedJob;
}

/** What a counted job carries of its client's share: the client's hash, to give the place back with. */
function sharing(job: CountedJob): { client?: string } {
  return job.client ? { client: job.client } : {};
}

/**
 * A place in the route's queue, and in its client's share (src/features/shedding/queue/depth.ts).
 * When Redis cannot count it, the job is queued uncounted (the queue itself is durable; a Redis
 * outage sheds nothing more), and it is never taken off the count either.
 */
async function takePlace(scope: RequestValue, route: Route, id: string, refusing: Limit): Promise<Place> {
  const at = Date.now();
  const home = scope.stores.offPath();
  // the client's share is counted only where the route has one: its jobs then carry the client's hash
  const job: CountedJob = route.queue.max_per_client ? { id, client: await clientOf(refusing, scope.facts) } : { id };
  if (!home) return { admitted: true, counted: false, at, job };
  try {
    const entered = await enterQueue(home, scope.config.key_prefix, route, at, job);
    return { admitted: entered.admitted, full: entered.full, counted: entered.admitted, at, job };
  } catch (e) {
    logError("queue_depth_unavailable", e, { route: route.name });
    return { admitted: true, counted: false, at, job };
  }
}

function givePlaceBack(scope: RequestValue, route: Route, at: number, job: CountedJob): Promise<undefined> {
  const home = scope.stores.offPath();
  return settleQuietly(
    home ? leaveQueue(home, scope.config.key_prefix, route, at, job) : Promise.resolve(),
    "queue_depth_release_failed",
    { route: route.name },
  );
}

/** Writes the job's `queued` status after the response, unless a later status landed first. */
function deferQueuedStatus(scope: RequestValue, route: Route, id: string): void {
  const home = scope.stores.offPath();
  if (!home) return;
  const status = {
    id,
    status: "queued" as const,
    route: route.name,
    failures: 0,
    updated_at: new Date().toISOString(),
  };
  scope.defer(
    settleQuietly(
      writeJob(home, scope.config.key_prefix, status, route.queue.status_ttl, true),
      "job_status_write_failed",
      { job: id },
    ),
  );
}

/** `GET /__sluice-jobs/{id}`: the status of a queued request. The id is its own capability. */
export async function jobStatusResponse(
  home: Store | undefined,
  config: Pick<Config, "key_prefix">,
  id: string,
): Promise<Response> {
  // a job lookup is no limited request: its problems are told as "allow", as its answers are
  if (!JOB_ID.test(id)) throw new Problem({ type: PROBLEMS.noSuchJob, detail: "not a job id sluice issued" }, "allow");
  const job = home
    ? await orElse(readJob(home, config.key_prefix, id), null, "job_status_read_failed", { job: id })
    : null;
  if (job === null)
    throw new Problem(
      {
        type: PROBLEMS.jobStatusUnavailable,
        detail: "the job store could not be reached",
        headers: { "Retry-After": "1" },
      },
      "allow",
    );
  if (!job) throw new Problem({ type: PROBLEMS.noSuchJob, detail: "unknown or expired job id" }, "allow");
  return new Response(JSON.stringify(job), {
    headers: { "content-type": "application/json", "cache-control": "no-store" },
  });
}

/** The gateway's job-status endpoint, before any route: the job id is the capability, no limits apply. */
export async function jobStatus(
  c: Context<SluiceEnv>,
  scope: Scope,
  next: () => Promise<void>,
): Promise<Response | void> {
  const path = scope.facts.matchPath;
  if (!(path.startsWith(JOBS_PATH) && c.req.method === "GET")) return next();
  // answered as allow: it is not a limited route (and a job lookup does not count as a decision)
  scope.route = undefined;
  scope.meta = undefined;
  return jobStatusResponse(scope.stores.offPath(), scope.config, path.slice(JOBS_PATH.length));
}
