import type { Limit } from "../../../config/index.js";
import type { Defer } from "../../../util/defer.js";
import { leaseEnd, LeaseTable, type GiveBack, type LeaseLevel, type LeaseTerms, type Renewal } from "./leases.js";
import type { OverrideCopies } from "../decision/overrides.js";
import { algorithm, leasableShape } from "../algorithms/registry.js";
import { groupByStore, runDecide, type GroupResult, type LeaseArgs } from "../decision/script-call.js";
import type { Bucket, Decision, LimitOutcome } from "../types.js";

/** A lease covers at least this long (ms) of demand, however near the store: a renewal has to come back in time, and tiny leases cost a renewal each. */
export const MIN_HORIZON_MS = 100;

/**
 * Leases between this isolate and Redis: decides a route from its leases when they cover it,
 * tells central decisions how much to ask, renews a lease that fell below half in the background
 * (`defer`, i.e. `ctx.waitUntil`: the client never waits for it), and gives back what expired,
 * was evicted or dropped, with decide.lua's `lease` and `return` modes. The bookkeeping itself is
 * src/features/rate-limit/isolate/leases.ts's.
 *
 * The horizon a lease covers is twice the store's smoothed round trip, as this isolate measures
 * it on its own script calls (at least MIN_HORIZON_MS): a renewal sent at half a lease comes back
 * before the other half is spent, at the demand seen.
 *
 * The calls it sends in the background carry the isolate's copy of the overrides (`overrides`),
 * as the decisions do.
 *
 * @example
 * const local = leases.decideLocally(buckets, Date.now(), defer, overrides); // no Redis request when defined
 */
export class LeaseBroker {
  readonly table: LeaseTable<Bucket>;

  constructor(capacity = 10_000) {
    this.table = new LeaseTable<Bucket>(leaseTerms, capacity);
  }

  /** The route decided from leases alone (no Redis request), `allow` with each lease's tokens as `remaining`; undefined when they do not cover it. */
  decideLocally(buckets: Bucket[], now: number, defer: Defer, overrides: OverrideCopies): Decision | undefined {
    this.sendGiveBacks(now, defer, overrides);
    const levels = this.table.admit(buckets, now);
    if (!levels) return undefined;
    const renewals = this.table.renewals(buckets, now, (b) => this.horizonMs(b));
    if (renewals.length > 0) defer(this.renew(renewals, overrides));
    const outcomes = buckets.map((b, i): LimitOutcome => {
      const level = levels[i] as LeaseLevel;
      const cost = b.params?.cost ?? b.limit.cost;
      return {
        limit: b.limit,
        key: b.key,
        cost,
        allowed: true,
        remaining: level.tokens,
        retryAfterMs: 0,
        resetMs: Math.max(0, level.fullAt - now),
        delayMs: 0,
      };
    });
    return { verdict: "allow", outcomes, leased: true };
  }

  /** What a central take asks for each bucket's lease (all zero unless the whole route is worth leases). */
  asks(buckets: Bucket[], now: number): Map<Bucket, number> {
    const asks = this.table.asks(buckets, now, (b) => this.horizonMs(b));
    return new Map(buckets.map((b, i) => [b, asks[i] ?? 0]));
  }

  /**
   * Central calls came back (`settled` in the order of `groups`): their round trips are sampled,
   * their grants become leases (given back when they expire, by a timer in `defer`), and the
   * buckets of an admitted request count towards their demand.
   */
  afterCentral(
    groups: Bucket[][],
    settled: Array<PromiseSettledResult<GroupResult>>,
    asked: Map<Bucket, number>,
    admitted: boolean,
    defer: Defer,
    overrides: OverrideCopies,
  ): void {
    const now = Date.now();
    settled.forEach((s, i) => {
      if (s.status === "fulfilled") this.settle(s.value, (b) => asked.get(b) ?? 0, defer, overrides);
      else for (const b of groups[i] ?? []) this.table.settle(b, asked.get(b) ?? 0, undefined, now, now);
    });
    if (!admitted) return;
    const results = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
    const resetOf = new Map(results.flatMap((r) => r.buckets.map((b, j) => [b, r.outcomes[j]?.resetMs ?? 0] as const)));
    const buckets = groups.flat();
    this.table.counted(
      buckets,
      buckets.map((b) => resetOf.get(b) ?? 0),
      now,
    );
  }

  /** Gives one admission's tokens back to the leases they came from (a replay that never reached the origin). */
  putBack(buckets: Bucket[]): void {
    this.table.putBack(buckets, Date.now());
  }

  /** A route's overrides changed: its leases were granted on the old figures, give them back. */
  forgetRoute(routePrefix: string, defer: Defer, overrides: OverrideCopies): void {
    this.table.dropRoute(routePrefix);
    this.sendGiveBacks(Date.now(), defer, overrides);
  }

  /** Sends what is due to be given back (expired, evicted, dropped leases), in `defer`. */
  sendGiveBacks(now: number, defer: Defer, overrides: OverrideCopies): void {
    const sending = this.giveBacksDue(now, overrides);
    if (sending) defer(sending);
  }

  private giveBacksDue(now: number, overrides: OverrideCopies): Promise<void> | undefined {
    const due = this.table.takeGiveBacks(now);
    return due.length > 0 ? this.giveBack(due, overrides) : undefined;
  }

  /** Twice the store's smoothed round trip as this isolate measured it (the decision budget's own estimate), at least MIN_HORIZON_MS. */
  private horizonMs(b: Bucket): number {
    const srtt = b.store.roundTripMs() ?? 0;
    return Math.max(MIN_HORIZON_MS, 2 * srtt);
  }

  private settle(r: GroupResult, askedOf: (b: Bucket) => number, defer: Defer, overrides: OverrideCopies): void {
    // a renewal's reply carries the Redis's change counter too: a client served from leases still learns of changes
    overrides.observe(r.store, r.version, r.receivedAt);
    let lastExpiry = 0;
    r.buckets.forEach((b, i) => {
      const grant = r.grants[i];
      this.table.settle(b, askedOf(b), grant, r.sentAt, r.receivedAt);
      if (grant && grant.tokens > 0) lastExpiry = Math.max(lastExpiry, leaseEnd(grant, r.sentAt, r.receivedAt));
    });
    // given back when it expires even if no request comes to this isolate by then
    if (lastExpiry > r.receivedAt)
      defer(sleep(lastExpiry - r.receivedAt + 1).then(() => this.giveBacksDue(Date.now(), overrides)));
  }

  /** Renewals in `lease` mode, one call per store; a failed one only leaves its ask free for the next. */
  private async renew(renewals: Array<Renewal<Bucket>>, overrides: OverrideCopies): Promise<void> {
    const byBucket = new Map(renewals.map((r) => [r.bucket, r]));
    const deferred: Array<Promise<unknown>> = [];
    const defer: Defer = (p) => void deferred.push(p);
    await Promise.all(
      groupByStore(renewals.map((r) => r.bucket)).map(async (group) => {
        const args = (b: Bucket): LeaseArgs => ({ ask: byBucket.get(b)?.ask ?? 0, close: byBucket.get(b)?.close });
        try {
          const r = await runDecide(group, "lease", (b) => overrides.input(b, Date.now()), args);
          this.settle(r, (b) => byBucket.get(b)?.ask ?? 0, defer, overrides);
        } catch {
          const now = Date.now();
          for (const b of group) this.table.settle(b, byBucket.get(b)?.ask ?? 0, undefined, now, now);
        }
      }),
    );
    await Promise.all(deferred);
  }

  /** Gives back leftover lease tokens in `return` mode, one call per lease; a lost one only costs its tokens until Redis releases them. */
  private async giveBack(due: Array<GiveBack<Bucket>>, overrides: OverrideCopies): Promise<void> {
    await Promise.allSettled(
      due.map((g) =>
        runDecide(
          [g.bucket],
          "return",
          (b) => overrides.input(b, Date.now()),
          () => ({ ask: 0, close: g.close }),
        ),
      ),
    );
  }
}

/**
 * Whether a limit's buckets may be leased: its `lease` setting, and a shape whose every admission
 * is worth one token whenever it is spent (the registry's leasable algorithms), decided the same
 * way everywhere (not shadow, not split, no header cost, no tier).
 */
export function leasable(l: Limit): boolean {
  return l.lease && !l.shadow && leasableShape(l);
}

/** A bucket's lease terms, or undefined when it may not be leased. */
export function leaseTerms(b: Bucket): LeaseTerms | undefined {
  const l = b.limit;
  if (!leasable(l)) return undefined;
  const p = b.params ?? l;
  const algo = algorithm(l.algorithm);
  return {
    id: `${b.store.id}\u0000${b.key}`,
    cost: p.cost,
    capacity: p[algo.capacity],
    holdsLeases: algo.lease?.holdsLeases ?? false,
  };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
