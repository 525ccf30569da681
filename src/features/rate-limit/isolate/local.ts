import type { AlgoModel, AlgoOutcome, AlgoState } from "../algorithms/algorithms.js";
import { longestWait } from "../decision/verdict.js";
import { algorithm } from "../algorithms/registry.js";
import type { Bucket, Decision, LimitOutcome } from "../types.js";

/** What a local decision needs of a bucket: its limit, its key, its figures and (concurrency) its slot; no store. */
export type LocalBucket = Pick<Bucket, "limit" | "key" | "params" | "slot">;

interface Held {
  model: AlgoModel;
  /** Isolate time (ms) at which the bucket is back to its initial state: from then on, forgetting it changes nothing. */
  idleAt: number;
}

/**
 * The isolate's own buckets, for decisions Redis could not make (`on_store_error = "local"`).
 *
 * Every limit of the route is decided here at its own figures (the tier's when the request has
 * one), with the same arithmetic the script is property-tested against (./algorithms.ts), all or
 * nothing as the script decides: a refused request charges nothing, shadow limits never refuse and
 * are charged only when they allow an admitted request. Differences from Redis, by design:
 *
 * - the clock is the isolate's `Date.now()` (on Workers it only moves across I/O, and a decision
 *   that failed over from Redis has just done some, so it is current enough for a limit);
 * - a bucket this isolate has not seen starts full: the isolate cannot know what Redis held, so an
 *   outage admits at most `burst + rate × its duration` per bucket per isolate;
 * - warm-up is not applied (a plain token bucket at the full rate); `split` and `global` limits are
 *   decided at their full figures, each isolate on its own;
 * - a concurrency limit counts the requests in flight through this isolate only (each freed by
 *   `release` when its response is delivered, or when its lease expires), so an outage lets up to
 *   `limit` per isolate in flight.
 *
 * Bounded: past `capacity` buckets, those back to their initial state go first (a sweep at most
 * every `sweepEveryMs`), then the least recently used, which only means that bucket starts full
 * again.
 *
 * @example
 * const local = new LocalBuckets();
 * const d = local.decide(buckets, Date.now(), "take"); // when decide() threw a StoreError
 */
export class LocalBuckets {
  /** In least-recently-used order: a take moves its buckets to the end. */
  private readonly held = new Map<string, Held>();
  private sweptAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly capacity = 10_000,
    private readonly sweepEveryMs = 1_000,
  ) {}

  /** Decides a request against `buckets` at isolate time `now` (ms); `peek` charges and records nothing. */
  decide(buckets: LocalBucket[], now: number, mode: "take" | "peek" = "take"): Decision {
    const t = now * 1000;
    const looks = buckets.map((b) => {
      const id = stateKey(b);
      const model = this.held.get(id)?.model ?? modelFor(b);
      const cost = b.params?.cost ?? b.limit.cost;
      return { b, id, model, cost, ...gated(model, t, cost, b) };
    });
    const admitted = looks.every(({ b, seen }) => seen.allowed || b.limit.shadow);
    const charge = admitted && mode === "take";
    const outcomes = looks.map(({ b, cost, seen, gate }): LimitOutcome => {
      const state: AlgoState = charge && seen.allowed ? seen.after : seen.before;
      return {
        limit: b.limit,
        key: b.key,
        cost,
        allowed: seen.allowed,
        // what requests of this priority may still take, as decide.lua reports it
        remaining: Math.max(0, state.remaining - (b.params?.floor ?? 0)),
        retryAfterMs: gate.retryAfterMs,
        resetMs: state.resetMs,
        delayMs: admitted && !b.limit.shadow ? seen.delayMs : 0,
        ...(b.slot === undefined || mode !== "take" ? {} : { slot: b.slot }),
      };
    });
    if (mode === "take") {
      for (const { id, model, seen } of looks) {
        const charged = charge && seen.allowed;
        if (charged) seen.commit();
        const held = this.held.get(id);
        // a bucket that was charged, or is in use (a refused client hammering it), stays; a fresh one refused holds nothing worth keeping
        if (charged) this.keep(id, { model, idleAt: now + seen.after.resetMs }, now);
        else if (held) this.keep(id, held, now);
      }
    }
    if (!admitted) {
      const refusing = outcomes.filter((o) => !o.allowed && !o.limit.shadow);
      return { verdict: "reject", outcomes, blocking: longestWait(refusing), cached: false };
    }
    return { verdict: outcomes.some((o) => !o.allowed) ? "shadow" : "allow", outcomes };
  }

  /** Frees the in-flight slots of a request decided here (concurrency limits; the others hold none). */
  release(buckets: LocalBucket[]): void {
    for (const b of buckets) if (b.slot !== undefined) this.held.get(stateKey(b))?.model.release?.(b.slot);
  }

  /** Buckets held (for tests and metrics). */
  get size(): number {
    return this.held.size;
  }

  /** (Re)inserts a bucket as the most recently used, making room first when full. */
  private keep(id: string, held: Held, now: number): void {
    this.held.delete(id);
    if (this.held.size >= this.capacity) this.makeRoom(now);
    this.held.set(id, held);
  }

  private makeRoom(now: number): void {
    if (now - this.sweptAt >= this.sweepEveryMs) {
      this.sweptAt = now;
      for (const [id, h] of this.held) if (h.idleAt <= now) this.held.delete(id);
    }
    for (const id of this.held.keys()) {
      if (this.held.size < this.capacity) break;
      this.held.delete(id);
    }
  }
}

/**
 * What a model says of a request that must leave `floor` tokens behind (its priority's,
 * docs/algorithms.md, Priorities), as decide.lua decides it: `gate` is the check as if it cost `cost + floor` (a
 * concurrency request: `1 + floor` free slots), whose verdict and retry-after stand; `seen` the
 * request at its own cost, with that verdict, for the state and the charge.
 */
function gated(model: AlgoModel, t: number, cost: number, b: LocalBucket): { seen: AlgoOutcome; gate: AlgoOutcome } {
  const floor = b.params?.floor ?? 0;
  const own = model.peek(t, cost, b.slot);
  if (floor <= 0) return { seen: own, gate: own };
  const need = (algorithm(b.limit.algorithm).inFlight ? 1 : cost) + floor;
  const gate = model.peek(t, need, b.slot);
  if (gate.allowed) return { seen: own, gate };
  // more than the bucket holds can never pass (decide.lua says so too)
  const { rate, burst } = figures(b);
  if (need > (algorithm(b.limit.algorithm).capacity === "burst" ? burst : rate)) gate.retryAfterMs = -1;
  // refused at the floor: nothing charged, the state as it stands
  const seen: AlgoOutcome = { ...own, allowed: false, delayMs: 0, after: own.before, commit: () => undefined };
  return { seen, gate };
}

/** The figures a bucket is decided with: the tier's (in `params`) or the limit's own. */
function figures(b: LocalBucket): { rate: number; period: number; burst: number } {
  return b.params ?? b.limit;
}

function modelFor(b: LocalBucket): AlgoModel {
  const { rate, period, burst } = figures(b);
  const l = b.limit;
  return algorithm(l.algorithm).model({
    rate,
    periodUs: period * 1000,
    burst,
    maxDelayUs: l.max_delay * 1000,
    nodelay: l.nodelay,
    align: l.align,
    marginUs: (l.margin ?? 0) * 1000,
  });
}

/**
 * The bucket key decide.lua uses, plus the figures: a client whose tier changes gets that tier's
 * bucket (full, as every bucket the isolate has not seen), never a reset of the one it emptied;
 * a reconfigured limit starts afresh rather than misreading a state kept in other units.
 */
function stateKey(b: LocalBucket): string {
  const { rate, period, burst } = figures(b);
  const l = b.limit;
  return `${b.key}#${l.algorithm}:${rate}:${period}:${burst}:${l.max_delay}:${l.nodelay ? 1 : 0}:${l.align ?? ""}:${l.margin ?? 0}`;
}
