import type { Limit } from "../../../config/index.js";
import type { Defer } from "../../../util/defer.js";
import { leaseEnd, LeaseTable, type GiveBack, type LeaseLevel, type LeaseTerms, type Renewal } from "./leases.js";
import type { OverrideInput } from "../decision/overrides.js";
import { algorithm, leasableShape } from "../algorithms/registry.js";
import { groupByStore, runDecide, type GroupResult, type LeaseArgs } from "../decision/script-call.js";
import type { CentralAnswer } from "../decision/central.js";
import type { Bucket, Decision, LimitOutcome } from "../types.js";

/** What a decision's central call is asked for each bucket's lease (all zero unless the whole route is worth leases). */
export type LeaseAsks = ReadonlyMap<Bucket, number>;

/**
 * The leases' side of a take: decided from the leases alone (`decision`), or the central call's
 * answer for the caller to settle (`central`).
 */
export type LeasedTake = { decision: Decision; central?: undefined } | { decision?: undefined; central: CentralAnswer };

/** A lease covers at least this long (ms) of demand, however near the store: a renewal has to come back in time, and tiny leases cost a renewal each. */
export const MIN_HORIZON_MS = 100;

/**
 * Leases between this isolate and Redis: takes the leases' side of a decision in one call
 * (`decideTake`: the route decided from its leases when they cover it, else the central call it is
 * handed told how much to ask, its grants made leases), renews a lease that fell below half (or, sized by a
 * burst, was spent) in the background (`defer`, i.e. `ctx.waitUntil`: the client never waits for
 * it), and gives back what expired, was evicted or dropped, with decide.lua's `lease` and
 * `return` modes. The bookkeeping itself is src/features/rate-limit/isolate/leases.ts's.
 *
 * The horizon a lease covers is twice the store's smoothed round trip, as this isolate measures
 * it on its own script calls (at least MIN_HORIZON_MS): a renewal sent at half a lease comes back
 * before the other half is spent, at the demand seen.
 *
 * The calls it sends in the background carry the overrides as the isolate's copy has them when
 * each is sent (`overridesOf`), as the decisions do.
 *
 * @example
 * const leases = new LeaseBroker((b, now) => overrides.input(b, now));
 * const taken = await leases.decideTake(buckets, Date.now(), defer, (asks) => decideCentrally(buckets, "take", overrides, asks, defer));
 * if (taken.decision) return taken.decision; // from the leases: no Redis request, or a refusal they answered after all
 */
export class LeaseBroker {
  readonly table: LeaseTable<Bucket>;

  /**
   * @param overridesOf what decide.lua is told of a bucket's overrides at a time (the isolate's copy)
   * @param observe what hears each reply of the broker's own calls (the change counter it reports)
   */
  constructor(
    private readonly overridesOf: (b: Bucket, now: number) => OverrideInput,
    capacity = 10_000,
    private readonly observe: (r: GroupResult) => void = () => undefined,
  ) {
    this.table = new LeaseTable<Bucket>(leaseTerms, capacity);
  }

  /**
   * A take, the leases' side of it in one place: decided here when they cover every limit (no
   * Redis request); else the central call (`central`, handed what to ask for each bucket's lease),
   * whose grants become leases, and a request it did not admit is decided once more from the
   * leases. When they do not answer, the central call's answer is the caller's to settle.
   */
  async decideTake(
    buckets: Bucket[],
    now: number,
    defer: Defer,
    central: (asks: LeaseAsks) => Promise<CentralAnswer>,
  ): Promise<LeasedTake> {
    const local = this.decideLocally(buckets, now, defer);
    if (local) return { decision: local };
    const asks = this.asks(buckets, now);
    const answer = await central(asks);
    const decision = this.settleCentral(buckets, answer, asks, defer);
    return decision ? { decision } : { central: answer };
  }

  /** The route decided from leases alone (no Redis request), `allow` with each lease's tokens as `remaining`; undefined when they do not cover it. */
  private decideLocally(buckets: Bucket[], now: number, defer: Defer): Decision | undefined {
    this.sendGiveBacks(now, defer);
    const levels = this.table.admit(buckets, now);
    if (!levels) return undefined;
    const renewals = this.table.renewals(buckets, now, (b) => this.horizonMs(b));
    if (renewals.length > 0) defer(this.renew(renewals));
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
  private asks(buckets: Bucket[], now: number): LeaseAsks {
    const asks = this.table.asks(buckets, now, (b) => this.horizonMs(b));
    return new Map(buckets.map((b, i) => [b, asks[i] ?? 0]));
  }

  /**
   * The central call came back (`central`, one call per Redis): round trips are sampled, grants
   * become leases (given back when they expire, by a timer in `defer`), and the buckets of an
   * admitted request count towards their demand. A request the call did not admit (refused, or a
   * Redis failed) is decided once more from the leases, which may have come back meanwhile: their
   * tokens are debited already, so spending them is as exact as Redis's own answer.
   */
  private settleCentral(
    buckets: Bucket[],
    central: CentralAnswer,
    asked: LeaseAsks,
    defer: Defer,
  ): Decision | undefined {
    const now = Date.now();
    for (const call of central.calls) {
      if (call.result) this.settle(call.result, (b) => asked.get(b) ?? 0, defer);
      else for (const b of call.buckets) this.table.settle(b, asked.get(b) ?? 0, undefined, now, now);
    }
    if (!central.admitted) return this.decideLocally(buckets, Date.now(), defer);
    const resetOf = new Map(
      central.calls.flatMap(
        ({ result: r }) => r?.buckets.map((b, j) => [b, r.outcomes[j]?.resetMs ?? 0] as const) ?? [],
      ),
    );
    const all = central.calls.flatMap((c) => c.buckets);
    this.table.counted(
      all,
      all.map((b) => resetOf.get(b) ?? 0),
      now,
    );
    return undefined;
  }

  /** Gives one admission's tokens back to the leases they came from (a replay that never reached the origin). */
  putBack(buckets: Bucket[]): void {
    this.table.putBack(buckets, Date.now());
  }

  /** A route's overrides changed: its leases were granted on the old figures, give them back. */
  forgetRoute(routePrefix: string, defer: Defer): void {
    this.table.dropRoute(routePrefix);
    this.sendGiveBacks(Date.now(), defer);
  }

  /** Sends what is due to be given back (expired, evicted, dropped leases), in `defer`. */
  sendGiveBacks(now: number, defer: Defer): void {
    const sending = this.giveBacksDue(now);
    if (sending) defer(sending);
  }

  private giveBacksDue(now: number): Promise<void> | undefined {
    const due = this.table.takeGiveBacks(now);
    return due.length > 0 ? this.giveBack(due) : undefined;
  }

  /** Twice the store's smoothed round trip as this isolate measured it (the decision budget's own estimate), at least MIN_HORIZON_MS. */
  private horizonMs(b: Bucket): number {
    const srtt = b.store.roundTripMs() ?? 0;
    return Math.max(MIN_HORIZON_MS, 2 * srtt);
  }

  private settle(r: GroupResult, askedOf: (b: Bucket) => number, defer: Defer): void {
    // a renewal's reply carries the Redis's change counter too: a client served from leases still learns of changes
    this.observe(r);
    let lastExpiry = 0;
    r.buckets.forEach((b, i) => {
      const grant = r.grants[i];
      this.table.settle(b, askedOf(b), grant, r.sentAt, r.receivedAt);
      if (grant && grant.tokens > 0) lastExpiry = Math.max(lastExpiry, leaseEnd(grant, r.sentAt, r.receivedAt));
    });
    // given back when it expires even if no request comes to this isolate by then
    if (lastExpiry > r.receivedAt)
      defer(sleep(lastExpiry - r.receivedAt + 1).then(() => this.giveBacksDue(Date.now())));
  }

  /** Renewals in `lease` mode, one call per store; a failed one only leaves its ask free for the next. */
  private async renew(renewals: Array<Renewal<Bucket>>): Promise<void> {
    const byBucket = new Map(renewals.map((r) => [r.bucket, r]));
    const deferred: Array<Promise<unknown>> = [];
    const defer: Defer = (p) => void deferred.push(p);
    await Promise.all(
      groupByStore(renewals.map((r) => r.bucket)).map(async (group) => {
        const args = (b: Bucket): LeaseArgs => ({ ask: byBucket.get(b)?.ask ?? 0, close: byBucket.get(b)?.close });
        try {
          const r = await runDecide(group, "lease", (b) => this.overridesOf(b, Date.now()), args);
          this.settle(r, (b) => byBucket.get(b)?.ask ?? 0, defer);
        } catch {
          const now = Date.now();
          for (const b of group) this.table.settle(b, byBucket.get(b)?.ask ?? 0, undefined, now, now);
        }
      }),
    );
    await Promise.all(deferred);
  }

  /** Gives back leftover lease tokens in `return` mode, one call per lease; a lost one only costs its tokens until Redis releases them. */
  private async giveBack(due: Array<GiveBack<Bucket>>): Promise<void> {
    await Promise.allSettled(
      due.map((g) =>
        runDecide(
          [g.bucket],
          "return",
          (b) => this.overridesOf(b, Date.now()),
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
