import { metricsKeys } from "../store/layout.js";
import type { Store } from "../store/redis.js";
import { asHash } from "../store/replies.js";
import { collapseIsolates, ENTRY_FIELD } from "./index.js";

/**
 * The reads of the metrics hashes and sorted sets that `MetricsBuffer.flush` (index.ts) writes:
 * the Prometheus scrape's and the dashboard's, so each structure's writer and readers sit in
 * src/metrics/.
 */

/** The all-time counters and the given minute's hash (field → count), for the Prometheus text. */
export async function readTotals(
  store: Store,
  prefix: string,
  minute: number,
): Promise<{ total: Record<string, string>; minute: Record<string, string> }> {
  const k = metricsKeys(prefix, minute);
  const [total, counts] = await Promise.all([store.hash.getAll(k.total), store.hash.getAll(k.minute)]);
  return { total, minute: collapseIsolates(counts) };
}

/**
 * Each minute's counts hash and its 20 most refused identifiers (`route|id` and refusals, highest
 * first, as a flat `[member, score, …]` list), in one pipeline.
 */
export async function readMinutes(
  store: Store,
  prefix: string,
  minutes: readonly number[],
): Promise<{ counts: Array<Record<string, string>>; blocked: unknown[] }> {
  const replies = await store.pipeline((p) => {
    for (const m of minutes) p.hgetall(metricsKeys(prefix, m).minute);
    for (const m of minutes) p.zrevrangeWithScores(metricsKeys(prefix, m).blocked, 0, 19);
  });
  return {
    counts: minutes.map((_, i) => collapseIsolates(asHash(replies[i]))),
    blocked: replies.slice(minutes.length),
  };
}

/**
 * The label and deny entry kept for each refused identifier (`{route}|{id}` and `entry:{route}|{id}`
 * of the labels hash of the minute it was last refused in), one HMGET reply each, in one pipeline.
 */
export function readLabels(
  store: Store,
  prefix: string,
  rows: ReadonlyArray<{ route: string; id: string; minute: number }>,
): Promise<unknown[]> {
  return store.pipeline((p) => {
    for (const r of rows) {
      const field = `${r.route}|${r.id}`;
      p.hmget(metricsKeys(prefix, r.minute).labels, field, ENTRY_FIELD + field);
    }
  });
}
