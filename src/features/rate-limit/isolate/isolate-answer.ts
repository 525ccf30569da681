import { refusalCacheable } from "../algorithms/registry.js";
import { longestWait } from "../decision/verdict.js";
import type { Bucket, Decision, LimitOutcome } from "../types.js";
import type { Defer } from "../../../util/defer.js";
import type { BlockedBuckets } from "./blocked.js";
import type { LeaseAnswer, LeaseBroker } from "./lease-broker.js";

/** What the isolate answers on its own, or what the central call asks for each bucket's lease. */
export type IsolateAnswer = LeaseAnswer;

/**
 * A take answered without Redis where the isolate can: a refusal from the blocked-bucket cache
 * (`blocked`), else an admission from the leases (`leases`) when they cover every limit. Else
 * the leases' asks for the central call. Without `blocked` (a peek) nothing is answered here.
 */
export function answerInIsolate(
  buckets: Bucket[],
  blocked: BlockedBuckets | undefined,
  leases: LeaseBroker | undefined,
  now: number,
  defer: Defer,
): IsolateAnswer {
  const cached = blocked && fromBlocked(buckets, blocked, now);
  if (cached) return { decision: cached };
  return leases?.answer(buckets, now, defer) ?? { asks: new Map<Bucket, number>() };
}

/** The refusal of every bucket known closed (those whose refusal holds whatever comes), or undefined when none is. */
function fromBlocked(buckets: Bucket[], blocked: BlockedBuckets, now: number): Decision | undefined {
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
