import type { Config, Route } from "../../../config/index.js";
import type { Env } from "../../../env.js";
import { decideLimits } from "../../rate-limit/core.js";
import { rateLimitIsolate, type IsolateOwner } from "../../rate-limit/isolate/rate-limit-isolate.js";
import type { Defer } from "../../../util/defer.js";
import { heldSlots, releaseSlots } from "../../rate-limit/decision/in-flight.js";
import {
  LATE_ANSWER_MS,
  originFailed,
  outcomeUnknown,
  sendToOrigin,
  withLateAnswer,
  type OriginReply,
} from "../../../origin/forward.js";
import { giveBackUnsentJob, takeUpJob, type JobClaim } from "../../guard/core.js";
import { envConnections, type Connect, type Stores } from "../../../region/index.js";
import { ConfigCache } from "../../../config/cache.js";
import type { Store } from "../../../store/redis.js";
import { leaseJob, readJob, releaseJob, writeJob, type JobStatus } from "./jobs.js";
import { requestOf, type JobMessage } from "./queue.js";
import { log, logError, settleQuietly } from "../../../util/log.js";
import type { MetricsBuffer } from "../../../metrics/index.js";
import { countQueue, observeDelivery } from "../../../metrics/queue.js";
import { countedJob, leaveQueue } from "./depth.js";
import { callBack, type CallbackOutcome } from "./callback.js";
import { reconciledDelivery } from "../../guard/reconcile-job.js";
import { forEachConcurrently } from "../../../util/concurrently.js";

/**
 * What the consumer takes of the isolate's runtime (the Worker passes its `Runtime`, which stands
 * above the capabilities and holds their isolate state).
 */
export interface ConsumerIsolate extends IsolateOwner {
  /** The isolate's state of one kind, made on first use (the configuration cache here; the rate limiter's, made by `make`). */
  own<T extends object>(kind: new () => T): T;
  stores(connect: Connect, config: Pick<Config, "home_region" | "timeout_ms" | "max_timeout_ms">): Stores;
  /** The isolate's metrics buffer: the queue's figures (src/metrics/queue.ts), flushed as the requests' are. */
  metrics: MetricsBuffer;
}

/** Refusals shorter than this are waited out in the consumer; longer ones go back to the queue. */
const PACE_MAX_WAIT_MS = 2_000;

/**
 * Jobs of one batch delivered at once: one at a time, a consumer delivers at 1 / (decision + origin
 * round trip), far below a limit of hundreds a second. Six is what a Worker invocation may hold
 * open at once; a job mostly holds one connection (its decision, then its delivery) and sometimes
 * two (a decision on two Redis, a callback beside the backlog update). Connections past six wait
 * for one to close, they do not fail.
 */
const DELIVERIES_AT_ONCE = 6;

/**
 * The queue consumer: delivers shed requests to the origin through the same limits as live
 * traffic. A message the limits refuse is sent again with a delay taken from the bucket's
 * retry-after (never delivered early); a 5xx or network failure is retried after the route's
 * `retry_delays`, one by one, then the job is marked `failed` and goes to the dead-letter queue
 * (a job with an idempotency key whose outcome may have acted, including a 5xx under
 * `on_origin_error = "hold"`, is failed at once, its key held indeterminate, unless the route's
 * reconcile endpoint says what became of it: src/features/guard/reconcile-job.ts). A
 * job older than the route's `max_age` is dropped there unsent. A job already delivered is never
 * delivered again (the queue itself delivers at least once).
 */
export async function onQueue(
  batch: MessageBatch<JobMessage>,
  env: Env,
  defer: Defer,
  runtime: ConsumerIsolate,
): Promise<void> {
  const loaded = runtime.own(ConfigCache).of(env);
  if (!loaded.ok) return batch.retryAll({ delaySeconds: 30 });
  const config = loaded.config;
  const stores = runtime.stores(envConnections(env, config.home_region), config);
  const consumer: Consumer = { config, env, stores, runtime, defer };
  const home = stores.offPath();
  try {
    await forEachConcurrently(batch.messages, DELIVERIES_AT_ONCE, async (message) => {
      try {
        await deliverOne(message, consumer, home);
      } catch (e) {
        logError("queue_error", e, { job: message.body.id });
        message.retry({ delaySeconds: 5 });
      }
    });
  } finally {
    runtime.metrics.flush(config, stores, defer);
  }
}

/** What the consumer delivers with. */
interface Consumer {
  config: Config;
  env: Env;
  stores: Stores;
  runtime: ConsumerIsolate;
  defer: Defer;
}

type Status = (s: Omit<JobStatus, "id" | "route" | "updated_at">) => Promise<unknown>;

/** One job: skipped when already done, paced by the route's limits, then delivered once. */
async function deliverOne(message: Message<JobMessage>, consumer: Consumer, home: Store | undefined): Promise<void> {
  const { config } = consumer;
  const m = message.body;
  const route = config.routes.find((r) => r.name === m.route);
  if (!home) return message.retry({ delaySeconds: 30 });
  const status: Status = (s) =>
    writeJob(
      home,
      config.key_prefix,
      { id: m.id, route: m.route, updated_at: new Date().toISOString(), ...s },
      route?.queue.status_ttl ?? 86_400_000,
    );

  const known = await readJob(home, config.key_prefix, m.id);
  if (m.deadLetter) {
    const { origin_status, expired } = known ?? {};
    await status({ status: "failed", failures: m.failures, origin_status, expired, dead_letter: true });
    return message.ack();
  }
  if (known?.status === "delivered" || known?.status === "failed") return message.ack();
  if (!route) {
    await status({ status: "failed", failures: m.failures });
    // the job never ran: its guards are given back
    await giveBackUnsentJob(m, consumer);
    return message.ack();
  }
  if (isStale(m, route)) return expire(message, route, consumer, status, home);
  const request = requestOf(m);
  const admitted = await paced(message, route, request, consumer);
  if (!admitted) return;
  // the in-flight slots of concurrency limits are held until the origin's answer has been dealt with
  try {
    if (!(await leaseJob(home, config.key_prefix, m.id, route.origin_timeout + LATE_ANSWER_MS + 5_000)))
      return message.retry({ delaySeconds: 5 });
    if (!config.originUrl) return message.retry({ delaySeconds: 30 });
    await deliverGuarded(message, route, request, consumer, { status, home, origin: config.originUrl });
  } finally {
    await admitted.releaseSlots();
  }
}

/**
 * Takes up the job's guards through the guard core (still its own: else it is not delivered),
 * delivers it, and settles or parks them with what the answer means, the guards renewed meanwhile.
 */
async function deliverGuarded(
  message: Message<JobMessage>,
  route: Route,
  request: Request,
  consumer: Consumer,
  job: { status: Status; home: Store; origin: URL },
): Promise<void> {
  const m = message.body;
  const taken = await takeUpJob(m, route, consumer);
  if (taken.kind === "refused") return notDelivered(message, route, consumer, job.status, job.home, taken.why);
  const jobClaim = taken.claim;
  try {
    const sent = await deliver(request, m, route, job.origin);
    // an unknown outcome is first asked about, on a route that reconciles: the origin's word decides
    const reply = mayHaveActed(m, route, sent)
      ? await reconciledDelivery(m, route, { ...consumer, metrics: consumer.runtime.metrics, origin: job.origin }, sent)
      : sent;
    await afterDelivery(message, route, reply, consumer, job.status, job.home, jobClaim);
  } finally {
    // whatever happened (a status write or a store failed): the renewals never outlive the delivery
    // (nothing more once the guards were settled or parked)
    await jobClaim.letLapse();
  }
}

/** Sends the job to the origin; past origin_timeout its answer is still awaited, in place: a late answer is a delivery. */
async function deliver(request: Request, m: JobMessage, route: Route, origin: URL): Promise<OriginReply> {
  const sent = await sendToOrigin(request, {
    origin,
    path: m.path,
    clientIp: m.ip,
    timeoutMs: route.origin_timeout,
    lateAnswerMs: LATE_ANSWER_MS,
    sluiceHeaders: { ...m.sluiceHeaders, "sluice-job-id": m.id },
  });
  return withLateAnswer(sent);
}

/**
 * Waits for the route's limits to admit the job: in place while the wait is short (the consumer
 * then delivers at the limit's own rate, instead of at the queue's redelivery granularity of whole
 * seconds), else the job is sent again for later and this returns undefined. Admitted, it gives
 * the release of the in-flight slots the decision took (concurrency limits), for after delivery.
 */
async function paced(
  message: Message<JobMessage>,
  route: Route,
  request: Request,
  consumer: Consumer,
): Promise<{ releaseSlots(): Promise<void> } | undefined> {
  const { config, stores, runtime, defer, env } = consumer;
  const m = message.body;
  // the claims sluice verified at enqueue: the job is decided on the buckets, tier and priority of the live request
  const caller = {
    facts: { ip: m.ip, matchPath: m.matchPath, headers: request.headers, url: new URL(request.url), claims: m.claims },
  };
  const isolate = rateLimitIsolate(runtime);
  // without the isolate's own buckets: a Redis that does not answer is thrown, never decided locally
  const place = { config, region: m.region, stores, defer, isolate: isolate.decisions };
  for (;;) {
    // a Redis that does not answer is thrown: the job is tried again later, never let past its limits
    const run = await decideLimits(place, { route, caller, mode: "take", onStoreError: "throw" });
    if (!run) throw new Error("the rate limiter decided nothing");
    const { decision, buckets } = run;
    const held = heldSlots(decision);
    if (decision.verdict !== "reject")
      return {
        releaseSlots: () => settleQuietly(releaseSlots(buckets, held, isolate.overrides), "slot_release_failed"),
      };
    const wait = decision.blocking.retryAfterMs;
    if (wait < 0 || wait > PACE_MAX_WAIT_MS) {
      await later(message, env, m, wait < 0 ? 60_000 : wait);
      return undefined;
    }
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/** What the origin's answer means for the job: delivered, failed for good, or retried with backoff. */
async function afterDelivery(
  message: Message<JobMessage>,
  route: Route,
  reply: OriginReply,
  consumer: Consumer,
  status: Status,
  home: Store,
  jobClaim: JobClaim,
): Promise<void> {
  const m = message.body;
  const originStatus = reply.response.status;
  if (mayHaveActed(m, route, reply)) {
    // the origin may have acted on it (no final answer, a connection broken after sending, no
    // answer even late, a 5xx the route holds as such): a side effect is never sent again; its
    // key is held as indeterminate
    await jobClaim.settleWith(reply);
    await status({ status: "failed", origin_status: originStatus, failures: m.failures, indeterminate: true });
    await done(m, route, consumer, home, { status: "failed", origin_status: originStatus });
    return message.ack();
  }
  if (!originFailed(reply)) {
    await jobClaim.settleWith(reply);
    await status({ status: "delivered", origin_status: originStatus, failures: m.failures });
    await done(m, route, consumer, home, { status: "delivered", origin_status: originStatus });
    return message.ack();
  }
  const failures = m.failures + 1;
  const delay = route.queue.retry_delays[failures - 1];
  // retried later with the same guards, parked (their renewals stopped first): the key stays held,
  // so duplicates still get 409
  if (delay === undefined || !(await jobClaim.park())) {
    await jobClaim.settleWith(reply);
    await status({ status: "failed", origin_status: originStatus, failures });
    await done({ ...m, failures }, route, consumer, home, { status: "failed", origin_status: originStatus });
    if (consumer.env.SLUICE_DLQ)
      await consumer.env.SLUICE_DLQ.send({ ...m, failures, deadLetter: true }, { contentType: "json" });
    return message.ack();
  }
  await reply.response.body?.cancel();
  await status({ status: "queued", origin_status: originStatus, failures });
  await releaseLease(home, consumer.config, m.id);
  return later(message, consumer.env, { ...m, failures }, delay);
}

/**
 * Whether a delivery that failed may have acted at the origin, so that the job must not be sent
 * again: no final answer (an interim 1xx), or, for a job with an idempotency key, a connection
 * broken after sending or no answer even late, or a 5xx on a route whose `on_origin_error =
 * "hold"` says a 5xx may have acted (as the live path holds it, and failover does not resend it).
 * Under `release` a 5xx says the origin did not act, and the job is retried.
 */
function mayHaveActed(m: JobMessage, route: Route, reply: OriginReply): boolean {
  if (reply.outcome === "unrelayable") return true;
  if (!m.claim) return false;
  const heldFailure = reply.outcome === "answered" && route.idempotency?.on_origin_error === "hold";
  return outcomeUnknown(reply) || (heldFailure && originFailed(reply));
}

/**
 * The job's guards are no longer its own (`lost`: its claim settled or taken over, its lock taken),
 * or a copy of it started delivering it before (`sent`: it may have reached the origin): it is not
 * delivered, now or later. Failed (`indeterminate` when it may have acted), and done with.
 */
async function notDelivered(
  message: Message<JobMessage>,
  route: Route,
  consumer: Consumer,
  status: Status,
  home: Store,
  why: "lost" | "sent",
): Promise<void> {
  const m = message.body;
  log("queue_job_not_delivered", { job: m.id, route: route.name, reason: why });
  await status({ status: "failed", failures: m.failures, ...(why === "sent" && { indeterminate: true }) });
  await done(m, route, consumer, home, { status: "failed" });
  message.ack();
}

/** Older than the route's `max_age`: not delivered late. */
function isStale(m: JobMessage, route: Route): boolean {
  return route.queue.max_age !== undefined && Date.now() - m.enqueuedAt > route.queue.max_age;
}

/**
 * Drops a job past `max_age` unsent: its guards given back (it never ran), its status `failed`
 * with `expired`, and the job to the dead-letter queue (or, without one, a log line: it is gone).
 */
async function expire(
  message: Message<JobMessage>,
  route: Route,
  consumer: Consumer,
  status: Status,
  home: Store,
): Promise<void> {
  const m = message.body;
  await giveBackUnsentJob(m, consumer);
  const dlq = consumer.env.SLUICE_DLQ;
  await status({ status: "failed", failures: m.failures, expired: true });
  await done(m, route, consumer, home, { status: "failed", expired: true });
  if (dlq) await dlq.send({ ...m, deadLetter: true }, { contentType: "json" });
  else log("queue_job_expired", { job: m.id, route: route.name, age_ms: Date.now() - m.enqueuedAt });
  message.ack();
}

/**
 * The job is done with: counted in the route's figures, taken off its backlog (after its final
 * status is written: a consumer dying in between leaves the count high, never low), and its
 * callback told, once: a copy of a job already done is acked before it gets here.
 */
async function done(
  m: JobMessage,
  route: Route,
  consumer: Consumer,
  home: Store,
  outcome: CallbackOutcome,
): Promise<void> {
  const metrics = consumer.runtime.metrics;
  if (outcome.status === "delivered") observeDelivery(metrics, route.name, Date.now() - m.enqueuedAt);
  else countQueue(metrics, route.name, outcome.expired ? "expired" : "failed");
  const told = callBack(m, route, outcome);
  if (m.counted)
    await settleQuietly(
      leaveQueue(home, consumer.config.key_prefix, route, m.enqueuedAt, countedJob(m)),
      "queue_depth_release_failed",
      { job: m.id, route: route.name },
    );
  await told;
}

/** Sends the job again after `ms` and acks this copy: deferrals are not failures. */
async function later(message: Message<JobMessage>, env: Env, m: JobMessage, ms: number): Promise<void> {
  if (!env.SLUICE_QUEUE) return message.retry({ delaySeconds: Math.ceil(ms / 1000) });
  await env.SLUICE_QUEUE.send(m, { contentType: "json", delaySeconds: Math.max(1, Math.ceil(ms / 1000)) });
  message.ack();
}

async function releaseLease(home: Store, config: Config, id: string): Promise<void> {
  await settleQuietly(releaseJob(home, config.key_prefix, id), "job_lease_release_failed", { job: id });
}
