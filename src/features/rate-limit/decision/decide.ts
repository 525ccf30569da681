import { StoreError } from "../../../store/deadline.js";
import type { BlockedBuckets } from "../isolate/blocked.js";
import type { LeaseBroker } from "../isolate/lease-broker.js";
import type { OverrideCopies, OverrideInput } from "./overrides.js";
import { refusalCacheable } from "../algorithms/registry.js";
import { groupByStore, runDecide, type GroupResult } from "./script-call.js";
import type { Bucket, Decision, LimitOutcome } from "../types.js";
import type { Defer } from "../../../util/defer.js";
import { settleQuietly } from "../../../util/log.js";

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
 * Decides a request against every limit of its route: from the isolate's leases when they cover
 * every limit (no Redis request at all), else one EVALSHA of `lua/decide.lua` per Redis involved
 * (the region's, and the home region's for `global` limits), sent in parallel, each
 * all-or-nothing, asking for leases on the way when the route is busy enough. When one Redis
 * admits and another refuses, what the first charged is refunded (deferred: the client does not
 * wait for it), so a refused request keeps nothing anywhere. A refusal (or a failed Redis) is
 * decided once more from the leases, which may have come back meanwhile: their tokens are
 * already debited, so spending them is as exact as Redis's own answer.
 * Buckets known to be closed are answered from `blocked` without calling Redis at all.
 * Runtime overrides come from the isolate's copy (`isolate.overrides`), refreshed in the
 * background (`defer`), never read on the request path unless the copy is too old.
 * Throws `StoreError` when a Redis fails; the caller applies `on_store_error`.
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
  const { blocked, overrides: copies } = isolate;
  const leases = mode === "take" ? isolate.leases : undefined;
  // before the cache answers: a client held by it must not keep its route's copy from refreshing,
  // and a changed override reopens the route's buckets this isolate holds as closed, and gives
  // back the leases granted on the old figures
  const changed = (routePrefix: string) => {
    blocked.forgetRoute(routePrefix);
    isolate.leases?.forgetRoute(routePrefix, defer, copies);
  };
  copies.refresh(buckets, now, defer, changed);
  const cached = mode === "take" ? fromCache(buckets, blocked, now) : undefined;
  if (cached) return cached;
  const local = leases?.decideLocally(buckets, now, defer, copies);
  if (local) return local;

  const overrides = (b: Bucket) => copies.input(b, now);
  const asked = leases?.asks(buckets, now) ?? new Map<Bucket, number>();
  const groups = groupByStore(buckets);
  const settled = await Promise.allSettled(
    groups.map((g) => runDecide(g, mode, overrides, (b) => ({ ask: asked.get(b) ?? 0 }))),
  );
  const results = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  // each reply carries its Redis's change counter: a copy behind it is refetched in the background
  for (const r of results) copies.observe(r.store, r.version, r.receivedAt);
  copies.refresh(buckets, Date.now(), defer, changed);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
  const admitted = !failed && results.every((r) => r.admitted);
  leases?.afterCentral(groups, settled, asked, admitted, defer, copies);
  if (!admitted && mode === "take") {
    for (const r of results) if (r.admitted) defer(settleQuietly(refund(r, overrides), "refund_failed"));
  }
  const fromLeases = admitted ? undefined : leases?.decideLocally(buckets, Date.now(), defer, copies);
  if (fromLeases) return fromLeases;
  if (failed)
    throw failed.reason instanceof StoreError ? failed.reason : new StoreError("error", String(failed.reason));

  return verdictOf(buckets, results, admitted, mode === "take" ? blocked : undefined, now);
}

/**
 * The verdict from the scripts' answers, each bucket's outcome in the route's order. A refusal's
 * honest wait is its longest; refusals that hold whatever comes are remembered in `blocked`.
 */
function verdictOf(
  buckets: Bucket[],
  results: GroupResult[],
  admitted: boolean,
  blocked: BlockedBuckets | undefined,
  now: number,
): Decision {
  const byBucket = new Map(
    results.flatMap((r) => r.buckets.map((b, i) => [b, r.outcomes[i] as LimitOutcome] as const)),
  );
  const outcomes = buckets.map((b) => byBucket.get(b) as LimitOutcome);
  const refusing = outcomes.filter((o) => !o.allowed && !o.limit.shadow);
  if (!admitted) {
    for (const o of refusing)
      if (blocked && o.retryAfterMs > 0 && cacheable(o)) blocked.block(o.key, now + o.retryAfterMs, now);
    return {
      verdict: "reject",
      outcomes,
      blocking: longestWait(refusing.length > 0 ? refusing : outcomes),
      cached: false,
    };
  }
  return { verdict: outcomes.some((o) => !o.allowed) ? "shadow" : "allow", outcomes };
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

/** Outcomes that may be answered from the blocked-bucket cache: ones whose refusal holds until retry-after whatever comes. */
function cacheable(b: Pick<Bucket, "limit">): boolean {
  return refusalCacheable(b.limit);
}

/** Gives back what an admitted group charged, when another Redis vetoed the request. */
async function refund(group: GroupResult, overrides: (b: Bucket) => OverrideInput): Promise<void> {
  const charged = group.buckets.filter((_, i) => group.outcomes[i]?.allowed);
  if (charged.length > 0) await runDecide(charged, "refund", overrides);
}

function fromCache(buckets: Bucket[], blocked: BlockedBuckets, now: number): Decision | undefined {
  const outcomes: LimitOutcome[] = [];
  for (const b of buckets) {
    if (!cacheable(b)) continue;
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

/** The refusal that lasts longest is the honest Retry-After: the request needs every limit. */
export function longestWait(outcomes: LimitOutcome[]): LimitOutcome {
  return outcomes.reduce((a, b) =>
    b.retryAfterMs < 0 || (a.retryAfterMs >= 0 && b.retryAfterMs > a.retryAfterMs) ? b : a,
  );
}
