import { refusalCacheable } from "../algorithms/registry.js";
import type { BlockedBuckets } from "../isolate/blocked.js";
import type { Bucket, Decision, LimitOutcome } from "../types.js";
import type { CentralAnswer } from "./central.js";
import { longestWait } from "./verdict.js";

/**
 * The decision settled from the central call's answer (`central`, its lease grants already the
 * leases', which did not answer it): the verdict, each bucket's outcome in the route's order, and
 * refusals that hold whatever comes remembered in the blocked-bucket cache (`blocked`; without it,
 * a peek, the isolate is left as it was). Throws the central call's `StoreError` when a Redis failed.
 */
export function settleDecision(
  buckets: Bucket[],
  central: CentralAnswer,
  blocked: BlockedBuckets | undefined,
  now: number,
): Decision {
  if (central.failure) throw central.failure;
  const byBucket = new Map(
    central.calls.flatMap(
      ({ result: r }) => r?.buckets.map((b, i) => [b, r.outcomes[i] as LimitOutcome] as const) ?? [],
    ),
  );
  const outcomes = buckets.map((b) => byBucket.get(b) as LimitOutcome);
  if (central.admitted) return { verdict: outcomes.some((o) => !o.allowed) ? "shadow" : "allow", outcomes };
  const refusing = outcomes.filter((o) => !o.allowed && !o.limit.shadow);
  for (const o of refusing)
    if (blocked && o.retryAfterMs > 0 && refusalCacheable(o.limit)) blocked.block(o.key, now + o.retryAfterMs, now);
  return {
    verdict: "reject",
    outcomes,
    blocking: longestWait(refusing.length > 0 ? refusing : outcomes),
    cached: false,
  };
}
