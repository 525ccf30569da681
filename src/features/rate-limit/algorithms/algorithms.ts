/**
 * The five algorithms of `lua/decide.lua`, in a second formulation of their own. Two uses, one
 * implementation:
 *
 * - the reference models the script is property-tested against (test/integration/algorithms-lua
 *   and decide-lua), each a different formulation from the script's, so agreement between the two
 *   is evidence rather than tautology;
 * - the arithmetic of the isolate's own buckets when Redis fails under `on_store_error = "local"`
 *   (src/features/rate-limit/isolate/local.ts), so a local decision is the one the script would make on the same state.
 *
 * - token_bucket   GCRA "virtual scheduling" (a theoretical arrival time), not a token count;
 * - leaky_bucket   GCRA as nginx limit_req describes it: a request's wait is how far its slot lies
 *                  ahead, not a drained level;
 * - fixed_window   admitted costs summed per aligned window index, not the script's rolled counter;
 * - sliding_window the same sums, for this window and the last; retry-after found by searching
 *                  the earliest passing millisecond, not by the script's closed form;
 * - concurrency    a map of slot ids to expiries, not the script's list of entries;
 * - sliding_log    a list of [time, cost] per admitted request, its live costs summed afresh at
 *                  every look, not the script's sorted set with a running sum trimmed by writes.
 *
 * Times are microseconds (`t`), exact: every fraction is avoided by scaling with BigInt (by `rate`
 * for the buckets, by the window length for the sliding window). Rounding reproduces the script's
 * ("ceil to µs, then to ms" for waits), which is part of the contract the replies are checked on.
 * Warm-up is not modelled here (test/support/warmup-model.ts is its reference).
 */

import { alignablePeriod, zoneWindow } from "./zone-window.js";

// Which model an algorithm has is the registry's to say (`modelOf` and `AlgoLimit` in
// ./registry.ts): this file imports nothing of it, so that the registry can import the models.

/** The figures a model counts with. */
export interface AlgoFigures {
  /** concurrency: the slots (requests in flight at once). */
  rate: number;
  /** concurrency: how long a slot is held at most (its lease). */
  periodUs: number;
  /** Capacity: tokens (token_bucket), queue places (leaky_bucket); `rate` for the windows and concurrency. */
  burst: number;
  /** leaky_bucket: the longest wait for a slot (µs). */
  maxDelayUs?: number;
  /** leaky_bucket: the queue is taken at once, the request waits 0. */
  nodelay?: boolean;
  /** fixed_window of whole days: windows start at local midnight in this IANA zone (./zone-window.ts). */
  align?: string;
  /** sliding_log: the log counts over periodUs + marginUs. */
  marginUs?: number;
}

export interface AlgoState {
  remaining: number;
  resetMs: number;
}

export interface AlgoOutcome {
  allowed: boolean;
  /** 0 when allowed; ms until this request could pass, nothing else arriving (-1: never). */
  retryAfterMs: number;
  /** leaky_bucket: ms this request waits for its slot, when allowed (0 otherwise, and for the others). */
  delayMs: number;
  /** The limit as it stands at `t`, nothing charged. */
  before: AlgoState;
  /** After this request's charge (equal to `before` when refused). */
  after: AlgoState;
  /** Charge the request (only if allowed). */
  commit(): void;
}

export interface AlgoModel {
  /** What this limit says about a request of `cost` at time `t` (µs); concurrency: `slot` names the slot its commit takes. */
  peek(t: number, cost: number, slot?: string): AlgoOutcome;
  /** concurrency: frees a slot (a no-op when it is not held, or has expired). */
  release?(slot: string): void;
}

const ceilDiv = (a: bigint, b: bigint): bigint => (a <= 0n ? 0n : (a + b - 1n) / b);
const max = (a: bigint, b: bigint): bigint => (a > b ? a : b);

/**
 * GCRA with a per-request cost. `tat` (theoretical arrival time) × rate; a request of cost c at t
 * passes iff max(tat, t) + c·T − t ≤ burst·T, T = period/rate. 0: the bucket has always been full.
 */
export class TokenBucket implements AlgoModel {
  private tat = 0n;
  constructor(private readonly l: AlgoFigures) {}

  peek(t: number, cost: number): AlgoOutcome {
    const rate = BigInt(this.l.rate);
    const P = BigInt(this.l.periodUs);
    const full = BigInt(this.l.burst) * P;
    const now = BigInt(t) * rate;
    const start = max(this.tat, now);
    const next = start + BigInt(cost) * P;
    const allowed = next - now <= full;
    const toMs = (scaled: bigint) => Number(ceilDiv(ceilDiv(scaled, rate), 1000n));
    const state = (tat: bigint): AlgoState => ({
      remaining: Number((full - (tat - now)) / P),
      resetMs: toMs(tat - now),
    });
    return {
      allowed,
      retryAfterMs: allowed ? 0 : toMs(next - now - full),
      delayMs: 0,
      before: state(start),
      after: state(allowed ? next : start),
      commit: () => {
        if (allowed) this.tat = next;
      },
    };
  }
}

/**
 * nginx limit_req as GCRA virtual scheduling, everything × rate (so T = period/rate is `period`):
 * a request at t starts at max(tat, t) and waits start − t; it passes iff its last slot fits the
 * queue (wait + (cost − 1)·T ≤ burst·T) and, unless nodelay, its wait is at most max_delay. On passing,
 * tat = start + cost·T; its delay is the wait (0 with nodelay).
 *
 * The script's own definitions are modelled for the figures: remaining = ⌊burst − wait_after/T⌋
 * (at least 0), reset = the wait after, both ceil'd to ms; retry = how far the wait exceeds the
 * largest allowed one.
 */
export class LeakyBucket implements AlgoModel {
  private tat = 0n;
  constructor(private readonly l: AlgoFigures) {}

  peek(t: number, cost: number): AlgoOutcome {
    const rate = BigInt(this.l.rate);
    const T = BigInt(this.l.periodUs); // the emission interval × rate
    const now = BigInt(t) * rate;
    const start = max(this.tat, now);
    const wait = start - now; // × rate
    const queue = BigInt(this.l.burst) * T;
    // all `cost` slots must fit in the queue; the first must be within max_delay
    const overQueue = wait + BigInt(cost - 1) * T - queue;
    const overDelay = this.l.nodelay ? 0n : wait - BigInt(this.l.maxDelayUs ?? 1_000_000) * rate;
    const allowed = overQueue <= 0n && overDelay <= 0n;
    const next = start + BigInt(cost) * T;
    const toMs = (scaled: bigint) => Number(ceilDiv(ceilDiv(scaled, rate), 1000n));
    const state = (tat: bigint): AlgoState => {
      const left = queue - (tat - now);
      return { remaining: left <= 0n ? 0 : Number(left / T), resetMs: toMs(tat - now) };
    };
    return {
      allowed,
      retryAfterMs: allowed ? 0 : toMs(max(overQueue, overDelay)),
      delayMs: allowed && !this.l.nodelay ? toMs(wait) : 0,
      before: state(start),
      after: state(allowed ? next : start),
      commit: () => {
        if (allowed) this.tat = next;
      },
    };
  }
}

/**
 * Admitted costs by window of `p` ms aligned on 0 (window of a millisecond m: ⌊m / p⌋). Only this
 * window and the last are ever read, so only they are kept: a bucket's memory stays constant.
 */
class WindowSums {
  private readonly sums = new Map<number, number>();
  constructor(readonly p: number) {}

  /** The costs admitted in window `w`. */
  sum(w: number): number {
    return this.sums.get(w) ?? 0;
  }

  /** Adds `cost` to window `w` (the window of a millisecond, for windows on UTC: ⌊m / p⌋). */
  add(w: number, cost: number): void {
    this.sums.set(w, this.sum(w) + cost);
    // windows before the last are never read again
    for (const old of this.sums.keys()) if (old < w - 1) this.sums.delete(old);
  }
}

const msOf = (t: number) => Math.floor(t / 1000);

/**
 * At most `rate` per window of `period`, windows aligned on Redis time (ms since the epoch), or
 * with `align` on local midnight in a time zone (the same function decide.lua's caller computes
 * the script's window with).
 */
export class FixedWindow implements AlgoModel {
  private readonly sums: WindowSums;
  constructor(private readonly l: AlgoFigures) {
    this.sums = new WindowSums(l.periodUs / 1000);
  }

  /** The window holding millisecond `ms`: its index and where it ends. */
  private windowAt(ms: number): { w: number; endMs: number } {
    const { p } = this.sums;
    if (this.l.align !== undefined && alignablePeriod(p)) {
      const z = zoneWindow(this.l.align, p, ms);
      return { w: z.index, endMs: z.endMs };
    }
    const w = Math.floor(ms / p);
    return { w, endMs: (w + 1) * p };
  }

  peek(t: number, cost: number): AlgoOutcome {
    const ms = msOf(t);
    const { w, endMs } = this.windowAt(ms);
    const used = this.sums.sum(w);
    const allowed = used + cost <= this.l.rate;
    const nextWindow = endMs - ms; // the count starts again from 0 there
    const state = (count: number): AlgoState => ({
      remaining: this.l.rate - count,
      resetMs: count > 0 ? nextWindow : 0,
    });
    return {
      allowed,
      retryAfterMs: allowed ? 0 : cost > this.l.rate ? -1 : nextWindow,
      delayMs: 0,
      before: state(used),
      after: state(allowed ? used + cost : used),
      commit: () => {
        if (allowed) this.sums.add(w, cost);
      },
    };
  }
}

/**
 * Two windows weighted: the last one counts for the share of it the sliding period still covers.
 * A request of cost c at elapsed e (ms) into window w passes iff
 * prev·(P − e) + (curr + c)·P ≤ rate·P, prev and curr the sums of the last window and this one.
 * Retry-after: the first millisecond at which the same request would pass, found by binary search
 * within this window and the next (the test is monotone within a window: the last window's weight
 * only shrinks), else two windows on, where both counts are 0.
 */
export class SlidingWindow implements AlgoModel {
  private readonly sums: WindowSums;
  constructor(private readonly l: AlgoFigures) {
    this.sums = new WindowSums(l.periodUs / 1000);
  }

  private at(ms: number): { prev: bigint; curr: bigint; e: bigint } {
    const w = Math.floor(ms / this.sums.p);
    return { prev: BigInt(this.sums.sum(w - 1)), curr: BigInt(this.sums.sum(w)), e: BigInt(ms - w * this.sums.p) };
  }

  private passes(ms: number, cost: number): boolean {
    const P = BigInt(this.sums.p);
    const { prev, curr, e } = this.at(ms);
    return prev * (P - e) + (curr + BigInt(cost)) * P <= BigInt(this.l.rate) * P;
  }

  /** The earliest offset in [lo, hi) at which the request passes, the test being monotone there. */
  private earliest(ms: number, cost: number, lo: number, hi: number): number | undefined {
    if (lo >= hi || !this.passes(ms + hi - 1, cost)) return undefined;
    while (lo < hi - 1) {
      const mid = Math.floor((lo + hi - 1) / 2);
      if (this.passes(ms + mid, cost)) hi = mid + 1;
      else lo = mid + 1;
    }
    return lo;
  }

  peek(t: number, cost: number): AlgoOutcome {
    const p = this.sums.p;
    const P = BigInt(p);
    const ms = msOf(t);
    const { prev, curr, e } = this.at(ms);
    const allowed = this.passes(ms, cost);
    const toEnd = p - Number(e);
    let retry = 0;
    if (!allowed) {
      retry =
        cost > this.l.rate
          ? -1
          : (this.earliest(ms, cost, 0, toEnd) ?? this.earliest(ms, cost, toEnd, toEnd + p) ?? toEnd + p);
    }
    const state = (c: bigint): AlgoState => {
      const used = ceilDiv(prev * (P - e) + c * P, P);
      const left = BigInt(this.l.rate) - used;
      return { remaining: left > 0n ? Number(left) : 0, resetMs: c > 0n ? 2 * p - Number(e) : prev > 0n ? toEnd : 0 };
    };
    return {
      allowed,
      retryAfterMs: retry,
      delayMs: 0,
      before: state(curr),
      after: state(allowed ? curr + BigInt(cost) : curr),
      commit: () => {
        if (allowed) this.sums.add(Math.floor(ms / p), cost);
      },
    };
  }
}

/**
 * The exact sliding log: a request of cost c at t passes iff the costs admitted in (t − P, t] plus
 * c are at most `rate`, P the period plus the margin (`marginUs`). Retry-after: until enough of the
 * oldest entries have left (an entry admitted at s leaves at s + P); reset: until the newest has.
 */
export class SlidingLog implements AlgoModel {
  /** [time µs, cost] of each admitted request, oldest first. */
  private entries: Array<[number, number]> = [];
  constructor(private readonly l: AlgoFigures) {}

  peek(t: number, cost: number): AlgoOutcome {
    const P = this.l.periodUs + (this.l.marginUs ?? 0);
    this.entries = this.entries.filter(([at]) => at > t - P);
    const live = this.entries;
    const used = live.reduce((sum, [, c]) => sum + c, 0);
    const allowed = used + cost <= this.l.rate;
    const toMs = (at: number) => Math.ceil((at + P - t) / 1000);
    const state = (sum: number, newest: number): AlgoState => ({
      remaining: Math.max(0, this.l.rate - sum),
      resetMs: sum > 0 ? toMs(newest) : 0,
    });
    const newest = live.reduce((m, [at]) => Math.max(m, at), 0);
    return {
      allowed,
      retryAfterMs: allowed ? 0 : cost > this.l.rate ? -1 : toMs(this.leavingAt(used + cost - this.l.rate)),
      delayMs: 0,
      before: state(used, newest),
      after: allowed ? state(used + cost, t) : state(used, newest),
      commit: () => {
        if (allowed) this.entries.push([t, cost]);
      },
    };
  }

  /** When the oldest entries holding at least `units` of cost were admitted (the last of them). */
  private leavingAt(units: number): number {
    let gone = 0;
    for (const [at, c] of this.entries) {
      gone += c;
      if (gone >= units) return at;
    }
    throw new Error("sliding log: fewer units live than must leave");
  }
}

/**
 * In-flight slots (concurrency): at most `rate` at once, each held from its take until it is
 * released or `periodUs` has passed, whichever is first. A request holds one slot; it is admitted
 * when `cost` slots are free (1, or more for one that must leave a floor: docs/algorithms.md, Priorities). Refused: retry-after is when enough slots expire to make room, none being released (an
 * upper bound); reset is when the last one expires. A slot expiring at exactly `t` is gone at `t`.
 */
export class InFlight implements AlgoModel {
  /** Slot id → expiry (µs). */
  private readonly slots = new Map<string, number>();
  private unnamed = 0;
  constructor(private readonly l: AlgoFigures) {}

  peek(t: number, cost: number, slot?: string): AlgoOutcome {
    for (const [id, expiry] of this.slots) if (expiry <= t) this.slots.delete(id);
    const expiries = [...this.slots.values()].sort((a, b) => a - b);
    const room = this.l.rate - expiries.length;
    const need = Math.max(1, cost);
    const allowed = room >= need;
    const expiry = t + this.l.periodUs;
    const toMs = (us: number) => Math.max(0, Math.ceil((us - t) / 1000));
    const state = (held: number[]): AlgoState => ({
      remaining: Math.max(0, this.l.rate - held.length),
      resetMs: held.length > 0 ? toMs(Math.max(...held)) : 0,
    });
    let retryAfterMs = 0;
    if (!allowed)
      retryAfterMs = this.l.rate <= 0 || need > this.l.rate ? -1 : toMs(expiries[need - room - 1] as number);
    // a slot taken again under its own id is renewed, not doubled
    const others = [...this.slots].filter(([id]) => id !== slot).map(([, e]) => e);
    return {
      allowed,
      retryAfterMs,
      delayMs: 0,
      before: state(expiries),
      after: state(allowed ? [...others, expiry] : expiries),
      commit: () => {
        if (allowed) this.slots.set(slot ?? `#${++this.unnamed}`, expiry);
      },
    };
  }

  release(slot: string): void {
    this.slots.delete(slot);
  }

  /** The slots held at `t`, as [id, expiry µs], soonest expiry first (for tests). */
  live(t: number): Array<[string, number]> {
    return [...this.slots].filter(([, expiry]) => expiry > t).sort((a, b) => a[1] - b[1]);
  }
}
