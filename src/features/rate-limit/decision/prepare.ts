import type { Defer } from "../../../util/defer.js";
import type { Bucket } from "../types.js";
import type { OverrideCopies, OverrideInput } from "./overrides.js";

/**
 * The overrides each bucket is decided with, from the isolate's copies (`copies`) at `now`:
 * their values, or "read" (the script reads the hash itself) while no copy younger than a second
 * is in. First it starts, in the background (`defer`), the refresh of each copy that is due, before
 * any isolate answer: a client held by the blocked-bucket cache must not keep its route's copy
 * from refreshing. `changed(routePrefix)` is told when a refresh finds a route's overrides changed
 * (refusals and leases decided on the old figures no longer hold). Never waits.
 */
export function overridesFor(
  buckets: Bucket[],
  copies: OverrideCopies,
  now: number,
  defer: Defer,
  changed: (routePrefix: string) => void,
): Map<Bucket, OverrideInput> {
  copies.refresh(buckets, now, defer, changed);
  return new Map(buckets.map((b) => [b, copies.input(b, now)]));
}
