import { refusalCacheable } from "../algorithms/registry.js";
import { longestWait } from "../decision/verdict.js";
import type { Bucket, Decision, LimitOutcome } from "../types.js";
import type { BlockedBuckets } from "./blocked.js";

/**
 * A take refused without Redis: every bucket of the route the blocked-bucket cache (`blocked`)
 * knows closed, by a refusal that holds whatever comes; undefined when none is. (An admission
 * without Redis is the leases', `LeaseBroker.decideTake`.)
 */
export function refusedInIsolate(buckets: Bucket[], blocked: BlockedBuckets, now: number): Decision | undefined {
  const outcomes: LimitOutcome[] = [];
  for (const b of buckets) {
    if (!refusalCacheable(b.limit)) continue;
    const wait = blocked.remaining(b.key, now);
    if (wait > 0)
      outcomes.push({
        limit: b.limit,
        key: b.key,
        cost: b.limit.cost,
        allowed: false,
        remaining: 0,
        retryAfterMs: wait,
        resetMs: wait,
        delayMs: 0,
      });
  }
  if (outcomes.length === 0) return undefined;
  return { verdict: "reject", outcomes, blocking: longestWait(outcomes), cached: true };
}
