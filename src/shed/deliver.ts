import type { Config, Route } from "../config/index.js";
import type { Env } from "../env.js";
import { blocked, configOf, leases } from "../gateway.js";
import type { RequestFacts } from "../keys/identify.js";
import { bucketsFor } from "../limiter/buckets.js";
import { decide, type Defer } from "../limiter/decide.js";
import { originFailed, sendToOrigin, type OriginReply } from "../origin/forward.js";
import { settleClaim, settleStore } from "../idempotency/guard.js";
import { refFromTicket, settleFailure } from "../idempotency/records.js";
import { release } from "../session/lock.js";
import { homeStore, offPathStore, regionStore } from "../region/index.js";
import type { Store } from "../store/redis.js";
import { jobKey, leaseJob, readJob, writeJob, type JobStatus } from "./jobs.js";
import { requestOf, type JobMessage } from "./queue.js";

/** Refusals shorter than this are waited out in the consumer; longer ones go back to the queue. */
const PACE_MAX_WAIT_MS = 2_000;

/**
 * The queue consumer: delivers shed requests to the origin through the same limits as live
 * traffic. A message the limits refuse is sent again with a delay taken from the bucket's
 * retry-after (never delivered early); a 5xx or network failure is retried with backoff up to the
 * route's `max_retries`, then the job is marked `failed` and goes to the dead-letter queue. A job
 * already delivered is never delivered again (the queue itself delivers at least once).
 */
export async function onQueue(batch: MessageBatch<JobMessage>, env: Env, defer: Defer): Promise<void> {
  const loaded = configOf(env);
  if (!loaded.ok) return batch.retryAll({ delaySeconds: 30 });
  const config = loaded.config;
  const home = offPathStore(env, config);
  for (const message of batch.messages) {
    try {
      await deliverOne(message, config, env, home, defer);
    } catch (e) {
      console.error(JSON.stringify({ event: "queue_error", job: message.body.id, message: (e as Error).message }));
      message.retry({ delaySeconds: 5 });
    }
  }
}

async function deliverOne(message: Message<JobMessage>, config: Config, env: Env, home: Store | undefined, defer: Defer): Promise<void> {
  const m = message.body;
  const route = config.routes.find((r) => r.name === m.route);
  if (!home) return message.retry({ delaySeconds: 30 });
  const status = (s: Omit<JobStatus, "id" | "route" | "updated_at">) =>
    writeJob(home, config.key_prefix, { id: m.id, route: m.route, updated_at: new Date().toISOString(), ...s }, route?.queue.status_ttl ?? 86_400_000);

  const known = await readJob(home, config.key_prefix, m.id);
  if (m.deadLetter) {
    await status({ status: "failed", failures: m.failures, origin_status: known?.origin_status, dead_letter: true });
    return message.ack();
  }
  if (known?.status === "delivered" || known?.status === "failed") return message.ack();
  if (!route) {
    await status({ status: "failed", failures: m.failures });
    // the job never ran: its guards are given back
    await releaseGuards(m, config, env);
    return message.ack();
  }

  const request = requestOf(m);
  const facts: RequestFacts = { ip: m.ip, matchPath: m.matchPath, headers: request.headers, url: new URL(request.url) };
  const stores = { region: m.region, regional: regionStore(env, config, m.region), home: homeStore(env, config, m.region) };
  const buckets = await bucketsFor(route, facts, config, stores);
  // Pace in place while the wait is short: the consumer then delivers at the limit's own rate,
  // instead of at the queue's redelivery granularity (whole seconds).
  for (;;) {
    const decision = await decide(buckets, { blocked, leases }, Date.now(), defer);
    if (decision.verdict !== "reject") break;
    const wait = decision.blocking.retryAfterMs;
    if (wait < 0 || wait > PACE_MAX_WAIT_MS) return later(message, env, m, wait < 0 ? 60_000 : wait);
    await new Promise((resolve) => setTimeout(resolve, wait));
  }

  if (!(await leaseJob(home, config.key_prefix, m.id, route.origin_timeout + 5_000))) return message.retry({ delaySeconds: 5 });
  const reply = await sendToOrigin(request, { origin: config.originUrl, path: m.path, clientIp: m.ip, timeoutMs: route.origin_timeout, sluiceHeaders: { ...m.sluiceHeaders, "sluice-job-id": m.id } });
  const originStatus = reply.response.status;
  if (reply.outcome === "unrelayable") {
    // the origin may have acted on it: never sent again; its key is held as indeterminate
    await settleGuards(m, route, config, env, reply);
    await status({ status: "failed", origin_status: originStatus, failures: m.failures, indeterminate: true });
    return message.ack();
  }
  if (!originFailed(reply)) {
    await settleGuards(m, route, config, env, reply);
    await status({ status: "delivered", origin_status: originStatus, failures: m.failures });
    return message.ack();
  }
  const failures = m.failures + 1;
  if (failures > route.queue.max_retries) {
    await settleGuards(m, route, config, env, reply);
    await status({ status: "failed", origin_status: originStatus, failures });
    if (env.SLUICE_DLQ) await env.SLUICE_DLQ.send({ ...m, failures, deadLetter: true }, { contentType: "json" });
    return message.ack();
  }
  // retried later with the same claim: the key stays in flight, so duplicates still get 409
  await reply.response.body?.cancel();
  await status({ status: "queued", origin_status: originStatus, failures });
  await releaseLease(home, config, m.id);
  return later(message, env, { ...m, failures }, Math.min(60_000, 1_000 * 2 ** (failures - 1)));
}

/**
 * The job is done with (delivered, or failed for good): its idempotency claim is settled with
 * what the origin did, exactly as on the live path (the answer stored for replays, or the key
 * released or held), and its session lock is given back.
 */
async function settleGuards(m: JobMessage, route: Route, config: Config, env: Env, reply: OriginReply): Promise<void> {
  const pending: Array<Promise<void>> = [];
  if (m.claim && route.idempotency) {
    const ref = refFromTicket(settleStore({ env, config, region: m.region }), config.key_prefix, route.name, m.claim);
    const res = await settleClaim(ref, m.claim.owner, route.idempotency, reply, (work) => pending.push(work));
    pending.push(res.arrayBuffer().then(() => undefined));
  } else {
    pending.push(reply.response.body?.cancel() ?? Promise.resolve());
  }
  await Promise.all(pending);
  await releaseGuards(m, config, env, Boolean(m.claim && route.idempotency));
}

/** Gives back what the job holds: its session lock, and its claim unless that was settled already. */
async function releaseGuards(m: JobMessage, config: Config, env: Env, claimSettled = false): Promise<void> {
  const store = settleStore({ env, config, region: m.region });
  if (m.claim && !claimSettled) await settleFailure(refFromTicket(store, config.key_prefix, m.route, m.claim), m.claim.owner, "release", undefined).catch(() => false);
  if (m.session) await release({ store, prefix: config.key_prefix, route: m.route, hash: m.session.hash, fenceHash: m.session.fenceHash }, m.session.owner).catch(() => false);
}

/** Sends the job again after `ms` and acks this copy: deferrals are not failures. */
async function later(message: Message<JobMessage>, env: Env, m: JobMessage, ms: number): Promise<void> {
  if (!env.SLUICE_QUEUE) return message.retry({ delaySeconds: Math.ceil(ms / 1000) });
  await env.SLUICE_QUEUE.send(m, { contentType: "json", delaySeconds: Math.max(1, Math.ceil(ms / 1000)) });
  message.ack();
}

async function releaseLease(home: Store, config: Config, id: string): Promise<void> {
  await home.redis.del(`${await jobKey(config.key_prefix, id)}:lease`).catch(() => undefined);
}
