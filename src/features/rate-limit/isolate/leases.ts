import { Bursts } from "./bursts.js";
import { Demand } from "./demand.js";
import type { LeaseClose, LeaseGrant } from "../decision/script-call.js";

/** The granularity of the expiry index (ms). */
const SLOT_MS = 100;

/** Taken off a lease's validity besides two round trips: timers fire late, clocks drift, isolates get busy. */
export const GUARD_MS = 10;

/** When the isolate stops spending a grant (isolate clock, ms): see Expiry at LeaseTable. */
export function leaseEnd(grant: Pick<LeaseGrant, "ms">, sentAt: number, receivedAt: number): number {
  return sentAt + grant.ms - 2 * (receivedAt - sentAt) - GUARD_MS;
}

/** What the table needs to know of a bucket that may be leased. */
export interface LeaseTerms {
  /** The bucket's identity in this isolate (its Redis key and the store's id). */
  id: string;
  /** Tokens one request takes. */
  cost: number;
  /** Its capacity (burst, or a window's rate): a lease asks at most a quarter of it. */
  capacity: number;
  /**
   * Whether Redis holds the bucket's leased tokens until their lease is closed (token buckets):
   * a fully spent lease is then worth closing early (with the next renewal), so the refill it
   * holds back is released before its epoch ends.
   */
  holdsLeases: boolean;
}

export type GiveBackReason = "expired" | "evicted" | "dropped";

/** Leftover lease tokens to give back to Redis (`return` mode). */
export interface GiveBack<B> {
  bucket: B;
  close: LeaseClose;
  reason: GiveBackReason;
}

/** A renewal to send (`lease` mode): tokens to ask, and a fully spent lease to close with it. */
export interface Renewal<B> {
  bucket: B;
  ask: number;
  close?: LeaseClose;
}

/** What a local admission leaves in each bucket's lease: tokens (a lower bound of the bucket's own) and when the bucket was last known to be full again. */
export interface LeaseLevel {
  tokens: number;
  fullAt: number;
}

/** One grant: tokens debited for this isolate in one call. */
interface Part {
  epoch: number;
  granted: number;
  left: number;
  /** Isolate time (ms) from which it is no longer spent. */
  expiresAt: number;
}

/** A fully spent lease not yet closed in Redis, kept until it could still matter there. */
interface Spent {
  close: LeaseClose;
  until: number;
}

interface Entry<B> {
  bucket: B;
  terms: LeaseTerms;
  /** Live grants, soonest to expire first (spent first). */
  parts: Part[];
  spent: Spent[];
  demand: Demand;
  bursts: Bursts;
  /** Tokens asked in calls still in flight: not asked again meanwhile. */
  pending: number;
  fullAt: number;
}

/** Running totals (tokens), for the metrics and the tests: `granted = admitted + given back + live` at all times. */
export interface LeaseTotals {
  granted: number;
  admitted: number;
  givenBack: Record<GiveBackReason, number>;
}

/**
 * The isolate's lease table: tokens decide.lua has already debited from a bucket and handed to
 * this isolate, which admits requests from them without a round trip. Bookkeeping only: the
 * calls to Redis are src/features/rate-limit/isolate/lease-broker.ts's.
 *
 * Every token in here was debited exactly once in Redis, and leaves the table exactly once: spent
 * by an admission, or given back (the caller sends it to Redis with decide.lua's `return` mode)
 * when its lease expires, is evicted or dropped. So over any history
 * `admitted + given back + live == granted`, and a local admission never spends a token Redis did
 * not debit.
 *
 * - **Expiry** is on the isolate clock: the grant's validity (Redis time) counted from when the
 *   call was *sent* (Redis read its clock later than that), less twice the round trip and
 *   GUARD_MS. So the isolate stops spending before Redis's lease ends (a fixed window's count
 *   starts again then; a token bucket releases what it held), and what it gives back at expiry
 *   reaches Redis while the lease still lasts there (a late give-back is dropped).
 * - **Demand** per bucket: tokens admitted per second (local and central), over two one-second
 *   windows weighted like a sliding window, once the bucket has been in use for a second (see
 *   Demand). A lease asks for `demand × horizon` (at most a quarter of the capacity): enough to
 *   last until a renewal sent at half comes back. Below one request's cost it asks nothing, so a
 *   bucket seen once (or rarely), or one burst, never takes a lease.
 * - **Bursts** per bucket (see Bursts): when they recur (two of more than one request within a
 *   second), a lease asks for the larger of the last two if that is more than `demand × horizon`,
 *   so the next burst is answered here; such a lease is renewed once it is spent (the next burst
 *   needs all of it), not at half. The first burst, and a one-off one, still ask nothing.
 * - **All or nothing**, like the script: a route is decided here only when every bucket has live
 *   lease tokens for its cost; asks and renewals are made only when every bucket of the route is
 *   worth a lease (a lease on one limit of a route whose other limit is always central is waste).
 * - **Bounded**: `capacity` buckets; past it the least recently used goes, its leftovers given back.
 *
 * @example
 * const table = new LeaseTable<Bucket>((b) => leaseTerms(b));
 * const left = table.admit(buckets, Date.now()); // undefined: decide centrally
 */
export class LeaseTable<B> {
  /** In least-recently-used order: a use moves its entry to the end. */
  private readonly entries = new Map<string, Entry<B>>();
  private outbox: Array<GiveBack<B>> = [];
  /** Ids of the entries with a part expiring in each SLOT_MS of isolate time: a sweep visits only those that may be due. */
  private readonly expiring = new Map<number, Set<string>>();
  readonly totals: LeaseTotals = { granted: 0, admitted: 0, givenBack: { expired: 0, evicted: 0, dropped: 0 } };

  /**
   * @param termsOf a bucket's terms, or undefined when it may not be leased
   * @param capacity buckets kept (demand and leases)
   */
  constructor(
    private readonly termsOf: (b: B) => LeaseTerms | undefined,
    private readonly capacity = 10_000,
  ) {}

  /**
   * Admits a request from leases alone: when every bucket has live tokens for its cost, takes
   * them (soonest-expiring first) and returns what each lease has left; else takes nothing and
   * returns undefined.
   */
  admit(buckets: readonly B[], now: number): LeaseLevel[] | undefined {
    if (buckets.length === 0) return undefined;
    const entries: Array<Entry<B>> = [];
    for (const b of buckets) {
      const terms = this.termsOf(b);
      const e = terms && this.entries.get(terms.id);
      if (!e) return undefined;
      this.expire(e, now);
      if (live(e) < e.terms.cost) return undefined;
      entries.push(e);
    }
    return entries.map((e) => {
      spend(e, e.terms.cost);
      this.expire(e, now);
      e.demand.add(now, e.terms.cost);
      e.bursts.add(now, e.terms.cost);
      this.totals.admitted += e.terms.cost;
      this.touch(e);
      return { tokens: live(e), fullAt: e.fullAt };
    });
  }

  /** A request admitted by Redis: its buckets' demand (what the next asks follow), and when each is full again. */
  counted(buckets: readonly B[], resetMs: readonly number[], now: number): void {
    buckets.forEach((b, i) => {
      const e = this.entryOf(b, now);
      if (!e) return;
      e.demand.add(now, e.terms.cost);
      e.bursts.add(now, e.terms.cost);
      e.fullAt = now + (resetMs[i] ?? 0);
      this.touch(e);
    });
  }

  /**
   * Tokens to ask for each bucket in a central take (what tops its lease up to `demand ×
   * horizonMs`, or its recurring bursts' peak), all zero unless every bucket is worth a lease.
   * Asked tokens count as pending until `settle`.
   */
  asks(buckets: readonly B[], now: number, horizonMs: (b: B) => number): number[] {
    const wanted = buckets.map((b) => {
      const e = this.entryOf(b, now);
      const target = e ? this.target(e, now, horizonMs(b)).tokens : 0;
      return { e, target };
    });
    if (wanted.some((w) => w.target === 0)) return buckets.map(() => 0);
    return wanted.map(({ e, target }) => {
      const entry = e as Entry<B>;
      const ask = Math.max(0, target - live(entry, now) - entry.pending);
      entry.pending += ask;
      return ask;
    });
  }

  /**
   * After a local admission: the buckets of the route whose lease fell below half of what it
   * should hold (below one request, when a burst sizes it), with what to ask and a spent lease
   * to close, if every bucket of the route is worth a lease and none has an ask in flight. Asked
   * tokens count as pending until `settle`.
   */
  renewals(buckets: readonly B[], now: number, horizonMs: (b: B) => number): Array<Renewal<B>> {
    const wanted = buckets.map((b) => {
      const e = this.entryOf(b, now);
      return { e, ...(e ? this.target(e, now, horizonMs(b)) : { tokens: 0, burst: false }) };
    });
    if (wanted.some((w) => w.tokens === 0)) return [];
    const out: Array<Renewal<B>> = [];
    for (const { e, tokens: target, burst } of wanted) {
      const entry = e as Entry<B>;
      const has = live(entry, now);
      if (entry.pending > 0 || (burst ? has >= entry.terms.cost : has * 2 >= target)) continue;
      const ask = target - has;
      entry.pending += ask;
      entry.spent = entry.spent.filter((s) => s.until > now);
      out.push({ bucket: entry.bucket, ask, close: entry.spent.shift()?.close });
    }
    return out;
  }

  /**
   * A call that asked `asked` tokens for `bucket` came back (`grant`) or failed (none). A grant
   * becomes a live lease until `sentAt + ms − round trip`; one that would already be over is
   * given back at once.
   */
  settle(bucket: B, asked: number, grant: LeaseGrant | undefined, sentAt: number, receivedAt: number): void {
    const e = this.entryOf(bucket, receivedAt);
    if (e) e.pending = Math.max(0, e.pending - asked);
    if (!grant || grant.tokens <= 0) return;
    this.totals.granted += grant.tokens;
    const expiresAt = leaseEnd(grant, sentAt, receivedAt);
    const part: Part = { epoch: grant.epoch, granted: grant.tokens, left: grant.tokens, expiresAt };
    if (!e || expiresAt <= receivedAt) {
      this.giveBack(bucket, part, "expired");
      return;
    }
    e.bucket = bucket;
    e.parts.push(part);
    e.parts.sort((a, b) => a.expiresAt - b.expiresAt);
    const slot = Math.floor(expiresAt / SLOT_MS);
    const ids = this.expiring.get(slot);
    if (ids) ids.add(e.terms.id);
    else this.expiring.set(slot, new Set([e.terms.id]));
    this.touch(e);
  }

  /** Gives back, at once, one admission's tokens to the leases they came from, if still live (a request answered by a replay). */
  putBack(buckets: readonly B[], now: number): void {
    for (const b of buckets) {
      const terms = this.termsOf(b);
      const e = terms && this.entries.get(terms.id);
      if (!e) continue;
      this.expire(e, now);
      const part = [...e.parts].reverse().find((p) => p.granted - p.left >= e.terms.cost);
      if (!part) continue;
      part.left += e.terms.cost;
      this.totals.admitted -= e.terms.cost;
    }
  }

  /** Drops every lease of a route (`{prefix}:{route}:`, its overrides changed), its leftovers to give back. */
  dropRoute(routePrefix: string): void {
    for (const [id, e] of this.entries) {
      if (!keyOf(id).startsWith(routePrefix)) continue;
      for (const p of e.parts) if (p.left > 0) this.giveBack(e.bucket, p, "dropped");
      this.entries.delete(id);
    }
  }

  /** What is to be given back now: leases expired by `now`, and those evicted or dropped since the last call. */
  takeGiveBacks(now: number): Array<GiveBack<B>> {
    for (const [slot, ids] of this.expiring) {
      if (slot * SLOT_MS > now) continue;
      for (const id of ids) {
        const e = this.entries.get(id);
        if (e) this.expire(e, now);
      }
      // a slot is visited until all of it has passed (a part late in it may not have expired yet)
      if ((slot + 1) * SLOT_MS <= now) this.expiring.delete(slot);
    }
    const due = this.outbox;
    this.outbox = [];
    return due;
  }

  /** Live lease tokens of a bucket at `now` (0 for none). */
  tokens(bucket: B, now: number): number {
    const terms = this.termsOf(bucket);
    const e = terms && this.entries.get(terms.id);
    return e ? live(e, now) : 0;
  }

  /** Buckets known (for tests and metrics). */
  get size(): number {
    return this.entries.size;
  }

  /**
   * What a bucket's lease should hold: its demand over the horizon, or its recent peak burst when
   * bursts recur and that is more (`burst`), at most a quarter of the capacity, nothing below one
   * request.
   */
  private target(e: Entry<B>, now: number, horizonMs: number): { tokens: number; burst: boolean } {
    const steady = Math.floor((e.demand.perSecond(now) * horizonMs) / 1000);
    const peak = e.bursts.peak(now, e.terms.cost);
    const t = Math.min(Math.max(steady, peak), Math.floor(e.terms.capacity / 4));
    return { tokens: t >= e.terms.cost ? t : 0, burst: peak > steady };
  }

  /** The entry of a leasable bucket, created if new (making room first); undefined when it may not be leased. */
  private entryOf(b: B, now: number): Entry<B> | undefined {
    const terms = this.termsOf(b);
    if (!terms) return undefined;
    const known = this.entries.get(terms.id);
    if (known) return known;
    if (this.entries.size >= this.capacity) this.evictOldest();
    const e: Entry<B> = {
      bucket: b,
      terms,
      parts: [],
      spent: [],
      demand: new Demand(),
      bursts: new Bursts(),
      pending: 0,
      fullAt: now,
    };
    this.entries.set(terms.id, e);
    return e;
  }

  private touch(e: Entry<B>): void {
    this.entries.delete(e.terms.id);
    this.entries.set(e.terms.id, e);
  }

  private evictOldest(): void {
    const [id, e] = this.entries.entries().next().value as [string, Entry<B>];
    for (const p of e.parts) if (p.left > 0) this.giveBack(e.bucket, p, "evicted");
    this.entries.delete(id);
  }

  /** Detaches the expired parts of an entry: their leftovers to give back; a fully spent lease's close is kept for a renewal. */
  private expire(e: Entry<B>, now: number): void {
    while (e.parts.length > 0 && (e.parts[0] as Part).expiresAt <= now) {
      const p = e.parts.shift() as Part;
      if (p.left > 0) this.giveBack(e.bucket, p, "expired");
    }
    // fully spent parts were moved to `spent` when spent; parts with tokens stay until they expire
    for (;;) {
      const i = e.parts.findIndex((p) => p.left === 0);
      if (i < 0) break;
      const [p] = e.parts.splice(i, 1) as [Part];
      if (e.terms.holdsLeases) keepSpent(e.spent, p);
    }
  }

  private giveBack(bucket: B, p: Part, reason: GiveBackReason): void {
    this.totals.givenBack[reason] += p.left;
    this.outbox.push({ bucket, close: { epoch: p.epoch, granted: p.granted, left: p.left }, reason });
    p.left = 0;
  }
}

/** The Redis key in an entry's id (`{store id}\0{key}`). */
function keyOf(id: string): string {
  return id.slice(id.lastIndexOf("\u0000") + 1);
}

/** Live tokens of an entry (parts expired by `now` not counted, when given). */
function live(e: { parts: Part[] }, now?: number): number {
  return e.parts.reduce((sum, p) => sum + (now === undefined || p.expiresAt > now ? p.left : 0), 0);
}

/** Keeps a fully spent part's close, merged with one of the same epoch (a close releases a whole epoch's count at once). */
function keepSpent(spent: Spent[], p: Part): void {
  const same = spent.find((s) => s.close.epoch === p.epoch);
  if (same) {
    same.close.granted += p.granted;
    same.until = Math.min(same.until, p.expiresAt);
  } else {
    spent.push({ close: { epoch: p.epoch, granted: p.granted, left: 0 }, until: p.expiresAt });
  }
}

/** Takes `cost` tokens, soonest-expiring parts first (the caller checked there are enough). */
function spend(e: Entry<unknown>, cost: number): void {
  let owed = cost;
  for (const p of e.parts) {
    const take = Math.min(owed, p.left);
    p.left -= take;
    owed -= take;
    if (owed === 0) break;
  }
}
