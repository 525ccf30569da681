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
 */
import depthLua from "../../../../lua/queue-depth.lua";
import type { Config, Route } from "../../../config/index.js";
import type { BacklogRow } from "../../../metrics/queue.js";
import { hashIdentifier } from "../../../identity/hash.js";
import { queueDepthKey } from "../../../store/layout.js";
import type { Store } from "../../../store/redis.js";

export interface Backlog {
  /** Jobs waiting. */
  depth: number;
  /** The enqueue time (ms) of the oldest job that may still wait; undefined when none waits. */
  headAt: number | undefined;
}

async function keyOf(prefix: string, route: string): Promise<string> {
  return queueDepthKey(prefix, await hashIdentifier(route));
}

/** Counts a job in unless the route's queue holds `max_depth` already: whether it was, and the depth after. */
export async function enterQueue(
  store: Store,
  prefix: string,
  route: Route,
  now: number,
): Promise<{ admitted: boolean; depth: number }> {
  const args = ["enter", now, route.queue.status_ttl, route.queue.max_depth ?? 0];
  const reply = (await store.run(store.script(depthLua), [await keyOf(prefix, route.name)], args)) as number[];
  return { admitted: Number(reply[0]) === 1, depth: Number(reply[1]) };
}

/** Takes a job off the route's count (it was delivered, failed for good, or dropped). */
export async function leaveQueue(store: Store, prefix: string, route: Route, enqueuedAt: number): Promise<void> {
  const args = ["leave", enqueuedAt, route.queue.status_ttl];
  await store.run(store.script(depthLua), [await keyOf(prefix, route.name)], args);
}

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
