import type { OverrideCopies } from "./overrides.js";
import { groupByStore, runDecide } from "./script-call.js";
import type { Bucket, Decision, LimitOutcome } from "../types.js";

/*
 * In-flight slots (concurrency limits; docs/algorithms.md, In-flight caps). A request takes one slot per
 * concurrency limit in its decision (decide.lua's "take", all or nothing with the route's other
 * limits), named by its bucket's `slot` id, and frees them once its response has been delivered:
 * decide.lua's "release" mode (or the isolate's own buckets, for a local decision). A slot never
 * released (an isolate gone mid-request) expires with its lease.
 */

/** The slots an admitted decision took: its concurrency limits that allowed (a refusal, a peek or a shadow refusal holds none). */
export function heldSlots(d: Decision): LimitOutcome[] {
  if (d.verdict === "reject") return [];
  return d.outcomes.filter((o) => o.slot !== undefined && o.allowed);
}

/** Frees slots in the Redis that holds each (the decision's own stores), one "release" call per Redis. */
export async function releaseSlots(
  buckets: readonly Bucket[],
  held: readonly LimitOutcome[],
  overrides: OverrideCopies,
): Promise<void> {
  const mine = buckets.filter((b) => held.some((o) => o.key === b.key && o.limit === b.limit && o.slot === b.slot));
  if (mine.length === 0) return;
  const now = Date.now();
  await Promise.all(groupByStore(mine).map((g) => runDecide(g, "release", (b) => overrides.input(b, now))));
}
