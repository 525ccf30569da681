import type { Config, Route } from "../../../config/index.js";
import type { Env } from "../../../env.js";
import type { RequestFacts } from "../../../identity/identify.js";
import { bucketsFor } from "../../rate-limit/decision/buckets.js";
import { decide, type IsolateState } from "../../rate-limit/decision/decision.js";
import type { Defer } from "../../../util/defer.js";
import { heldSlots, releaseSlots } from "../../rate-limit/decision/in-flight.js";
import type { OverrideCopies } from "../../rate-limit/decision/overrides.js";
import {
  originFailed,
  outcomeUnknown,
  sendToOrigin,
  withLateAnswer,
  type OriginReply,
} from "../../../origin/forward.js";
import { LATE_ANSWER_MS, noteSettled, settleClaim } from "../../idempotency/guard.js";
import { refFromTicket, settleFailure } from "../../idempotency/records.js";
import { release } from "../../session/lock.js";
import type { RecordTrail } from "../../idempotency/trail.js";
import { newTraceparent } from "../../../util/traceparent.js";
import { envConnections, SETTLE_TIMEOUT_MS, type Connect, type Stores } from "../../../region/index.js";
import { ConfigCache } from "../../../config/cache.js";
import type { Store } from "../../../store/redis.js";
import { leaseJob, readJob, releaseJob, writeJob, type JobStatus } from "./jobs.js";
import { requestOf, type JobMessage } from "./queue.js";
import { logError, settleQuietly } from "../../../util/log.js";

/**
 * What the consumer takes of the isolate's runtime (the Worker passes its `Runtime`, which stands
 * above the capabilities and holds their isolate state).
 */
export interface ConsumerIsolate {
  /** The isolate's state of one kind, made on first use (the configuration cache here). */
  own<T extends object>(kind: new () => T): T;
  decisions: IsolateState;
  overrides: OverrideCopies;
  stores(connect: Connect, config: Pick<Config, "home_region" | "timeout_ms" | "max_timeout_ms">): Stores;
}

/** Refusals shorter than this are waited out in the consumer; longer ones go back to the queue. */
const PACE_MAX_WAIT_MS = 2_000;

/**
 * The queue consumer: delivers shed requests to the origin through the same limits as live
 * traffic. A message the limits refuse is sent again with a delay taken from the bucket's
 * retry-after (never delivered early); a 5xx or network failure is retried with backoff up to the
 * route's `max_retries`, then the job is marked `failed` and goes to the dead-letter queue. A job
 * already delivered is never delivered again (the queue itself delivers at least once).
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
  for (const message of batch.messages) {
    try {
      await deliverOne(message, consumer, home);
    } catch (e) {
      logError("queue_error", e, { job: message.body.id });
      message.retry({ delaySeconds: 5 });
    }
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
    await status({ status: "failed", failures: m.failures, origin_status: known?.origin_status, dead_letter: true });
    return message.ack();
  }
  if (known?.status === "delivered" || known?.status === "failed") return message.ack();
  if (!route) {
    await status({ status: "failed", failures: m.failures });
    // the job never ran: its guards are given back
    await releaseGuards(m, consumer);
    return message.ack();
  }
  const request = requestOf(m);
  const admitted = await paced(message, route, request, consumer);
  if (!admitted) return;
  // the in-flight slots of concurrency limits are held until the origin's answer has been dealt with
  try {
    if (!(await leaseJob(home, config.key_prefix, m.id, route.origin_timeout + LATE_ANSWER_MS + 5_000)))
      return message.retry({ delaySeconds: 5 });
    if (!config.originUrl) return message.retry({ delaySeconds: 30 });
    const reply = await deliver(request, m, route, config.originUrl);
    await afterDelivery(message, route, reply, consumer, status, home);
  } finally {
    await admitted.releaseSlots();
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
  const facts: RequestFacts = { ip: m.ip, matchPath: m.matchPath, headers: request.headers, url: new URL(request.url) };
  const buckets = await bucketsFor(route, facts, config, {
    region: m.region,
    regional: stores.decision(m.region),
    home: stores.home(),
  });
  for (;;) {
    const decision = await decide(buckets, runtime.decisions, Date.now(), defer);
    const held = heldSlots(decision);
    if (decision.verdict !== "reject")
      return {
        releaseSlots: () => settleQuietly(releaseSlots(buckets, held, runtime.overrides), "slot_release_failed"),
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
): Promise<void> {
  const m = message.body;
  const originStatus = reply.response.status;
  if (reply.outcome === "unrelayable" || (m.claim && outcomeUnknown(reply))) {
    // the origin may have acted on it (no final answer, a connection broken after sending, no
    // answer even late): a side effect is never sent again; its key is held as indeterminate
    await settleGuards(m, route, consumer, reply);
    await status({ status: "failed", origin_status: originStatus, failures: m.failures, indeterminate: true });
    return message.ack();
  }
  if (!originFailed(reply)) {
    await settleGuards(m, route, consumer, reply);
    await status({ status: "delivered", origin_status: originStatus, failures: m.failures });
    return message.ack();
  }
  const failures = m.failures + 1;
  if (failures > route.queue.max_retries) {
    await settleGuards(m, route, consumer, reply);
    await status({ status: "failed", origin_status: originStatus, failures });
    if (consumer.env.SLUICE_DLQ)
      await consumer.env.SLUICE_DLQ.send({ ...m, failures, deadLetter: true }, { contentType: "json" });
    return message.ack();
  }
  // retried later with the same claim: the key stays in flight, so duplicates still get 409
  await reply.response.body?.cancel();
  await status({ status: "queued", origin_status: originStatus, failures });
  await releaseLease(home, consumer.config, m.id);
  return later(message, consumer.env, { ...m, failures }, Math.min(60_000, 1_000 * 2 ** (failures - 1)));
}

/**
 * The job is done with (delivered, or failed for good): its idempotency claim is settled with
 * what the origin did, exactly as on the live path (the answer stored for replays, or the key
 * released or held), and its session lock is given back.
 */
async function settleGuards(m: JobMessage, route: Route, consumer: Consumer, reply: OriginReply): Promise<void> {
  const { config, stores } = consumer;
  const pending: Array<Promise<void>> = [];
  if (m.claim && route.idempotency) {
    const ref = refFromTicket(
      stores.fixed(SETTLE_TIMEOUT_MS) as Store,
      config.key_prefix,
      route.name,
      m.claim,
      jobTrail(m, config),
    );
    const settlement = await settleClaim(ref, m.claim.owner, route.idempotency, reply);
    pending.push(settlement.response.arrayBuffer().then(() => undefined));
    pending.push(settlement.settled.then((o) => noteSettled(ref, o)));
  } else {
    pending.push(reply.response.body?.cancel() ?? Promise.resolve());
  }
  await Promise.all(pending);
  await releaseGuards(m, consumer, Boolean(m.claim && route.idempotency));
}

/** Gives back what the job holds: its session lock, and its claim unless that was settled already. */
async function releaseGuards(m: JobMessage, consumer: Consumer, claimSettled = false): Promise<void> {
  const { config } = consumer;
  const store = consumer.stores.fixed(SETTLE_TIMEOUT_MS) as Store;
  if (m.claim && !claimSettled)
    await settleFailure(
      refFromTicket(store, config.key_prefix, m.route, m.claim, jobTrail(m, config)),
      m.claim.owner,
      "release",
      undefined,
    ).catch((e: unknown) => logError("job_claim_release_failed", e, { job: m.id }));
  if (m.session)
    await release(
      { store, prefix: config.key_prefix, route: m.route, hash: m.session.hash, ledgerLength: config.ledger_length },
      m.session.owner,
    ).catch((e: unknown) => logError("job_session_release_failed", e, { job: m.id }));
}

/** The ledger's context of a job's claim: the trace it was queued with (forwarded to the origin too), the ledger's length. */
function jobTrail(m: JobMessage, config: Config): RecordTrail {
  return { trace: m.sluiceHeaders?.traceparent ?? newTraceparent(), ledgerLength: config.ledger_length };
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
