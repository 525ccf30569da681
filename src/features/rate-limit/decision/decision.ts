import type { BlockedBuckets } from "../isolate/blocked.js";
import type { LeaseAsks, LeaseBroker, LeasedTake } from "../isolate/lease-broker.js";
import type { OverrideCopies } from "./overrides.js";
import { overridesFor } from "./prepare.js";
import { refusedInIsolate } from "../isolate/isolate-answer.js";
import { decideCentrally, type CentralAnswer } from "./central.js";
import { settleDecision } from "./settle-decision.js";
import { groupByStore, runDecide } from "./script-call.js";
import type { Bucket, Decision, LimitOutcome } from "../types.js";
import type { Defer } from "../../../util/defer.js";

export { DECIDE_SCRIPT, scriptCall, type ScriptBucket, type ScriptMode } from "./script-call.js";
export type { Bucket, BucketParams } from "../types.js";
export type { Defer } from "../../../util/defer.js";

/** What an isolate keeps between requests for its decisions: buckets known closed, its leases (none: every decision central), and its copy of the overrides. */
export interface IsolateState {
  blocked: BlockedBuckets;
  leases?: LeaseBroker;
  overrides: OverrideCopies;
}

/**
 * Decides a request against every limit of its route, in four stages, each entered once:
 *
 * 1. the overrides each bucket is decided with, from the isolate's copy (refreshed in the
 *    background, never read on the request path unless the copy is too old);
 * 2. a refusal the isolate knows already, from the blocked-bucket cache (no Redis request);
 * 3. the leases' side of the take, in one call of the lease broker: an admission from the leases
 *    when they cover every limit (no Redis request); else the one central call, decide.lua once
 *    per Redis involved, in parallel, all or nothing, asking for leases on the way when the route
 *    is busy enough, whose grants become leases (a refusal or a failed Redis is decided once more
 *    from them, which may have come back meanwhile);
 * 4. settling what the leases did not answer: the verdict, refusals that hold remembered.
 *
 * A peek neither reads nor changes the blocked-bucket cache or the leases: it goes straight to the
 * central call. Throws `StoreError` when a Redis fails; the caller applies `on_store_error`.
 *
 * @example
 * const d = await decide(buckets, { blocked, leases, overrides }, Date.now(), (p) => ctx.waitUntil(p));
 * if (d.verdict === "reject") return tooManyRequests(d.blocking);
 */
export async function decide(
  buckets: Bucket[],
  isolate: IsolateState,
  now: number,
  defer: Defer,
  mode: "take" | "peek" = "take",
): Promise<Decision> {
  const { blocked, leases } = mode === "take" ? isolate : { blocked: undefined, leases: undefined };
  const changed = (routePrefix: string) => forgetRoute(isolate, routePrefix, defer);
  // 1. the overrides
  const overrides = overridesFor(buckets, isolate.overrides, now, defer, changed);
  // 2. a refusal the isolate knows
  const known = blocked && refusedInIsolate(buckets, blocked, now);
  if (known) return known;
  // 3. the leases' side, handed the central call: the broker calls it only when its leases do not answer
  const central = async (asks: LeaseAsks) => {
    const answer = await decideCentrally(buckets, mode, overrides, asks, defer);
    followVersions(answer, buckets, isolate.overrides, defer, changed);
    return answer;
  };
  const taken = leases ? await leases.decideTake(buckets, now, defer, central) : await unleased(central);
  if (taken.decision) return taken.decision;
  // 4. the verdict of the central call's answer
  return settleDecision(buckets, taken.central, blocked, now);
}

/** A take without leases (a peek, or an isolate that keeps none): the central call asks for none. */
async function unleased(central: (asks: LeaseAsks) => Promise<CentralAnswer>): Promise<LeasedTake> {
  return { central: await central(new Map()) };
}

/**
 * Each reply carries its Redis's change counter (`{prefix}:version`, read in the script's MGET): a
 * copy of the overrides behind it is refetched in the background, for the next decision. This is
 * how an isolate hears of changes without polling.
 */
function followVersions(
  central: CentralAnswer,
  buckets: Bucket[],
  copies: OverrideCopies,
  defer: Defer,
  changed: (routePrefix: string) => void,
): void {
  for (const { result } of central.calls) if (result) copies.observe(result.store, result.version, result.receivedAt);
  copies.refresh(buckets, Date.now(), defer, changed);
}

/**
 * A route's overrides changed: the refusals this isolate holds for its buckets were decided on the
 * old figures, so they are forgotten, and its leases, granted on them, are given back.
 */
function forgetRoute(isolate: IsolateState, routePrefix: string, defer: Defer): void {
  isolate.blocked.forgetRoute(routePrefix);
  isolate.leases?.forgetRoute(routePrefix, defer);
}

/**
 * Gives back what an admitted decision charged, e.g. for a request answered by a replay: the
 * request never reached the origin, so it should cost its client nothing. A decision made from
 * leases gives its tokens back to them. `leases` and `overrides` are the isolate's the decision
 * was made with.
 */
export async function giveBack(
  buckets: Bucket[],
  d: Decision,
  leases: LeaseBroker | undefined,
  overrides: OverrideCopies,
): Promise<void> {
  if (d.verdict === "reject") return;
  const charged = buckets.filter((b) => d.outcomes.find((o) => o.key === b.key && o.limit === b.limit)?.allowed);
  if (d.leased) return leases?.putBack(charged);
  const now = Date.now();
  await Promise.all(groupByStore(charged).map((g) => runDecide(g, "refund", (b) => overrides.input(b, now))));
}

/** A decision answered in the isolate (the blocked-bucket cache, or leases): it has no round trip to report. */
export function madeWithoutRedis(d: Decision): boolean {
  return d.verdict === "reject" ? d.cached : d.leased === true;
}

/** One bucket's state as it stands, nothing spent (for the admin API: its overrides read live, in the script). */
export async function peekBucket(bucket: Bucket): Promise<LimitOutcome> {
  return (await runDecide([bucket], "peek", () => "read")).outcomes[0] as LimitOutcome;
}
