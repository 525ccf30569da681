/*
 * A queue route's backlog, known without asking Cloudflare: a counter per route in the home Redis,
 * +1 when a job is queued and −1 when it is done with (delivered, failed for good, dropped as too
 * old), each side one script call (lua/queue-depth.lua), and the enqueue time of the oldest job
 * that may still wait.
 *
 * The check at enqueue is exact: "count it if below max_depth" runs in Redis as one script, so
 * isolates racing for the last places never queue more than max_depth between them; the
 * approximate way (INCR, then DECR when over) costs the same round trip and overshoots under
 * exactly the burst the bound is for.
 *
 * Drift: a job is taken off after its final status is written. A consumer that dies between the
 * two (or a message the platform drops) leaves the count one high per such job, at most one
 * batch (`max_batch_size`) per consumer that dies; a count too high sheds early, it never lets
 * the queue grow past max_depth. The key expires `status_ttl` after the last enqueue or job done,
 * so an idle route starts again from 0. A job that was queued while Redis could not count it
 * carries no `counted` mark and is never taken off.
 *
 * Each client's share (`max_per_client`) is counted in the same script calls: a sorted set per
 * client and route of the client's waiting jobs, each entry with the time it lapses on its own
 * (when the job could no longer be delivered). A job's end takes its entry out; a job whose end is
 * never counted stops counting when its entry lapses, so a client's count never drifts upward for
 * longer than one job's life, however busy the client keeps it. The set holds at most the share.
 */
import depthLua from "../../../../lua/queue-depth.lua";
import type { Config, Limit, Route } from "../../../config/index.js";
import type { BacklogRow } from "../../../metrics/queue.js";
import { asKeyHash, hashIdentifier, identityHash, type KeyHash } from "../../../identity/hash.js";
import { identify, ipIdentity, type RequestFacts } from "../../../identity/identify.js";
import { limitFacts } from "../../rate-limit/decision/buckets.js";
import { queueClientKey, queueDepthKey } from "../../../store/layout.js";
import type { Store } from "../../../store/redis.js";
import { logError } from "../../../util/log.js";

export interface Backlog {
  /** Jobs waiting. */
  depth: number;
  /** The enqueue time (ms) of the oldest job that may still wait; undefined when none waits. */
  headAt: number | undefined;
}

async function keyOf(prefix: string, route: string): Promise<string> {
  return queueDepthKey(prefix, await hashIdentifier(route));
}

/**
 * A job as the backlog counts it: its id, and the hash of the client whose share it takes (absent:
 * no share is counted, as for a route without `max_per_client`).
 */
export interface CountedJob {
  id: string;
  client?: KeyHash;
}

/**
 * A queued job as the backlog counted it: its id and, where it took a client's share, that
 * client's hash (checked to be one: a message that names anything else names no key).
 */
export function countedJob(m: { id: string; client?: string }): CountedJob {
  if (m.client === undefined) return { id: m.id };
  try {
    return { id: m.id, client: asKeyHash(m.client) };
  } catch (e) {
    // only sluice writes jobs: a client that is no hash is a message from elsewhere, said so
    logError("queue_job_client_unreadable", e, { job: m.id });
    return { id: m.id };
  }
}

/** Why a job was not counted in: the queue holds `max_depth`, or its client holds `max_per_client`. */
export type Full = "depth" | "client";

/**
 * Counts a job in unless the route's queue holds `max_depth` already or its client holds its
 * `max_per_client`: whether it was (else which bound refused it), the depth after, and the
 * client's jobs after.
 */
export async function enterQueue(
  store: Store,
  prefix: string,
  route: Route,
  now: number,
  job: CountedJob = { id: "" },
): Promise<{ admitted: boolean; full?: Full; depth: number; mine: number }> {
  const share = job.client ? route.queue.max_per_client : undefined;
  const args = ["enter", now, route.queue.status_ttl, route.queue.max_depth ?? 0, job.id, share ?? 0, entryLife(route)];
  const keys = await keysOf(prefix, route.name, share ? job.client : undefined);
  const reply = (await store.run(store.script(depthLua), keys, args)) as number[];
  const status = Number(reply[0]);
  const full: Full | undefined = status === 1 ? undefined : status === 2 ? "client" : "depth";
  return { admitted: status === 1, ...(full ? { full } : {}), depth: Number(reply[1]), mine: Number(reply[2] ?? 0) };
}

/** Takes a job off the route's count and off its client's (it was delivered, failed for good, or dropped). */
export async function leaveQueue(
  store: Store,
  prefix: string,
  route: Route,
  enqueuedAt: number,
  job: CountedJob = { id: "" },
): Promise<void> {
  const args = ["leave", enqueuedAt, route.queue.status_ttl, job.id];
  await store.run(store.script(depthLua), await keysOf(prefix, route.name, job.client), args);
}

/**
 * How long a job counts against its client at most, whatever becomes of it: until it could no
 * longer be delivered (`max_age`, else until its status is gone), so that a job whose end was never
 * counted (a consumer that died) frees its client's place on its own.
 */
function entryLife(route: Route): number {
  return Math.min(route.queue.max_age ?? route.queue.status_ttl, route.queue.status_ttl);
}

async function keysOf(prefix: string, route: string, client: KeyHash | undefined): Promise<string[]> {
  const routeHash = await hashIdentifier(route);
  const depth = queueDepthKey(prefix, routeHash);
  return client ? [depth, queueClientKey(prefix, routeHash, client)] : [depth];
}

/**
 * The client a queued job counts against: the identity the refusing limit keys on (what the
 * route's own limits call one client), hashed; for a limit that names no client (`global`,
 * `path`), the IP. Hashed with the route out of it: the key is the route's already.
 */
export function clientOf(limit: Limit, facts: RequestFacts): Promise<KeyHash> {
  const names = limit.key.some((part) => !SHARED_PARTS.has(part));
  const identity = names ? identify(limit.key, limitFacts(limit, facts), "ip") : undefined;
  return identityHash(identity?.kind === "id" ? identity.id : ipIdentity(facts.ip));
}

/** Key parts every client shares: a limit keyed on these alone says nothing of who the client is. */
const SHARED_PARTS = new Set(["global", "path"]);

/** Every queue route's backlog, in one request. */
export async function readBacklogs(store: Store, prefix: string, routes: readonly string[]): Promise<Backlog[]> {
  if (routes.length === 0) return [];
  const keys = await Promise.all(routes.map((r) => keyOf(prefix, r)));
  const replies = await store.pipeline((p) => keys.forEach((k) => p.hmget(k, "depth", "head_at")));
  return replies.map((reply) => {
    const [depth, headAt] = Array.isArray(reply) ? (reply as Array<string | null>) : [null, null];
    const n = Math.max(0, Number(depth ?? 0) || 0);
    return { depth: n, headAt: n > 0 && headAt ? Number(headAt) : undefined };
  });
}

/** The backlog of every queue route of `config`, as the metrics show it (now less the oldest job's enqueue time). */
export async function backlogRows(
  store: Store,
  config: Pick<Config, "key_prefix" | "routes">,
  now: number,
): Promise<BacklogRow[]> {
  const routes = config.routes.filter((r) => r.on_limit === "queue").map((r) => r.name);
  const backlogs = await readBacklogs(store, config.key_prefix, routes);
  return backlogs.map((b, i) => ({
    route: routes[i] as string,
    depth: b.depth,
    oldestAgeMs: b.headAt === undefined ? 0 : Math.max(0, now - b.headAt),
  }));
}
