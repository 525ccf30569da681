import {
  FixedWindow,
  InFlight,
  LeakyBucket,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
  type AlgoFigures,
  type AlgoModel,
} from "./algorithms.js";
import type { ResponseSource } from "../cost/response-figures.js";
import type { AlgorithmColumns } from "../decision/limit-columns.js";

/**
 * Every algorithm sluice knows, and what each place that treats them differently needs to know:
 * decide.lua's ARGV (src/features/rate-limit/decision/script-call.ts), the blocked-bucket cache (isolate/isolate-answer.ts, decision/settle-decision.ts), leases
 * (lease-broker.ts, and the schema's `lease` default), local decisions (local.ts), and the
 * configuration's checks (../schema.ts, config/exactness.ts). An algorithm is one entry here
 * plus its table in lua/decide.lua (`code` is its index in the script's `algorithms`); one that
 * brings a setting of its own also adds it to AlgorithmSetting, and its field to the schema; one
 * the script reads gets a column of its own (never another algorithm's), named in
 * ../decision/limit-columns.ts and the script's `COLUMNS`, and sent by its `columns`.
 *
 * Nothing here imports the configuration: config/ imports this file.
 */

/** Which of a bucket's figures is at fault, so the caller can name its own field (config/exactness.ts). */
export interface ExactnessProblem {
  field: "rate" | "burst" | "period";
  message: string;
}

/** Settings of a limit that only some algorithms read. */
export type AlgorithmSetting = "warmup" | "max_delay" | "nodelay" | "margin";

/** A limit's algorithm-specific settings, as the schema gives them (durations in ms, defaults filled). */
export interface AlgorithmSettings {
  warmup?: number;
  max_delay: number;
  nodelay: boolean;
  /** sliding_log: how much longer than the period the log counts (ms), for the spread of delay between decision and origin. */
  margin?: number;
}

/** What one call of decide.lua says of one bucket beyond its limit's settings. */
export interface CallArgs {
  /** concurrency: the id of the request's in-flight slot (none for a peek). */
  slot?: string;
  /** sliding_log: the id of the request's entries in the log (none for a peek). */
  entry?: string;
}

/**
 * The most requests of one key a concurrency limit lets in flight at once: its bucket lists every
 * live slot (about 55 bytes each, a UUID and its expiry), read and rewritten whole by every take and
 * release, so 1000 slots keep it near 55 KB.
 */
export const MAX_IN_FLIGHT = 1_000;

/**
 * The largest `rate` of a sliding log: its key keeps one sorted-set member per admitted request of
 * the last period, whatever its cost (about 130 bytes each past 128 of them, docs/algorithms.md),
 * and each costs at least 1, so 10,000 keep it near 1.3 MB at worst.
 */
export const MAX_LOG_ENTRIES = 10_000;

/** The figures decide.lua counts a bucket with (a limit's, a tier's or an override's). */
export interface CountedFigures {
  rate: number;
  burst: number;
  periodMs: number;
}

export interface AlgorithmEntry {
  /** `algo` in decide.lua's ARGV: the number atop lua/decide.lua, the index in its `algorithms`. */
  readonly code: number;
  /** decide.lua's ARGV columns of this algorithm alone (../decision/limit-columns.ts) for a limit, in one call. */
  columns(l: AlgorithmSettings, call: CallArgs): AlgorithmColumns;
  /** What a bucket holds at most, and so what a lease is a share of: `burst`, or `rate` for a window (a limit's `burst` must then equal it). */
  readonly capacity: "burst" | "rate";
  /**
   * The settings this algorithm reads; a limit of an algorithm that does not read one may not set
   * it. In the order a misplaced one is reported (only the first a limit sets is).
   */
  readonly settings: readonly AlgorithmSetting[];
  /** Whether a refusal holds until its retry-after whatever comes, as far as the algorithm goes (refusalCacheable adds the rest). */
  refusalHolds(l: AlgorithmSettings): boolean;
  /** Absent: never leased. */
  readonly lease?: {
    /** Whether the algorithm's settings allow leases (leasableShape adds the rest). */
    allowed(l: Pick<AlgorithmSettings, "warmup">): boolean;
    /** `allowed` in words, for the configuration's error ("(without warmup)"). */
    readonly condition?: string;
    /** decide.lua holds leased tokens out of the refill (a bucket), rather than counting them in the window. */
    readonly holdsLeases: boolean;
  };
  /** The algorithm in JS (./algorithms.ts): local decisions, and the reference the script is tested against. */
  model(f: AlgoFigures): AlgoModel;
  /**
   * It counts requests in flight (`limit` slots, each held while its request runs, released when it
   * ends), not a rate: its figures, its words in a refusal and in `RateLimit-Policy`, a floor's
   * need (one slot, whatever the cost), and that a call without a request's end cannot use it.
   */
  readonly inFlight?: true;
  /** What a request's call names in the bucket: its in-flight slot, or its entries in a log (a refund removes them). */
  readonly callId?: "slot" | "entry";
  /** Its windows can be aligned to a time zone's midnight (`align`), so the script is sent the window by the isolate's clock. */
  readonly aligned?: true;
  /** It can be charged from the response (`cost = { response = … }`): a debt it carries until the tokens come. */
  readonly responseCost?: true;
  /** What stops decide.lua from counting these figures exactly, if anything, beyond the period every algorithm checks (config/exactness.ts). */
  exactness(f: CountedFigures): ExactnessProblem | undefined;
}

export const ALGORITHMS = {
  token_bucket: {
    code: 1,
    columns: (l) => ({ warmup_us: (l.warmup ?? 0) * 1000 }),
    capacity: "burst",
    settings: ["warmup"],
    // warm-up retry-afters are estimates at the current rate, which only rises
    refusalHolds: (l) => l.warmup === undefined,
    // a warming bucket's tokens are worth more later than now
    lease: { allowed: (l) => l.warmup === undefined, condition: "(without warmup)", holdsLeases: true },
    model: (f) => new TokenBucket(f),
    responseCost: true,
    exactness: exactUnits,
  },
  leaky_bucket: {
    code: 2,
    columns: (l) => ({ max_delay_us: l.max_delay * 1000, nodelay: l.nodelay ? 1 : 0 }),
    capacity: "burst",
    // nodelay first: a limit setting both is told about nodelay
    settings: ["nodelay", "max_delay"],
    refusalHolds: () => true,
    model: (f) => new LeakyBucket(f),
    exactness: exactUnits,
  },
  fixed_window: {
    code: 3,
    columns: () => ({}),
    capacity: "rate",
    settings: [],
    refusalHolds: () => true,
    lease: { allowed: () => true, holdsLeases: false },
    model: (f) => new FixedWindow(f),
    aligned: true,
    exactness: exactWindow,
  },
  sliding_window: {
    code: 4,
    columns: () => ({}),
    capacity: "rate",
    settings: [],
    refusalHolds: () => true,
    model: (f) => new SlidingWindow(f),
    exactness: exactWindow,
  },
  concurrency: {
    code: 5,
    // the slot the request takes ("" for a peek, which takes none)
    columns: (_, call) => ({ slot_id: call.slot ?? "" }),
    // `rate` and `burst` are both the limit (the schema compiles them so)
    capacity: "rate",
    // its own fields (`limit`, a `lease` duration) are checked with the figures: ./figures.ts
    settings: [],
    // a slot may be released at any moment: no refusal holds until its retry-after
    refusalHolds: () => false,
    model: (f) => new InFlight(f),
    inFlight: true,
    callId: "slot",
    exactness: exactInFlight,
  },
  sliding_log: {
    code: 6,
    // the request's entry id: its members in the log, which a refund removes; the margin in µs
    columns: (l, call) => ({ entry_id: call.entry ?? "", margin_us: (l.margin ?? 0) * 1000 }),
    capacity: "rate",
    settings: ["margin"],
    // room comes only as members leave the period, at the time the refusal names (or a refund)
    refusalHolds: () => true,
    // no lease: a leased unit would have to sit in the log with a time it was not spent at
    model: (f) => new SlidingLog(f),
    callId: "entry",
    exactness: exactLog,
  },
} satisfies Record<string, AlgorithmEntry>;

export type Algorithm = keyof typeof ALGORITHMS;

/** A model's figures with the algorithm that counts them. */
export interface AlgoLimit extends AlgoFigures {
  algorithm: Algorithm;
}

/** The entry of an algorithm. */
export function algorithm(name: Algorithm): AlgorithmEntry {
  return ALGORITHMS[name];
}

/** Every algorithm's name, in the registry's order, for the schema's enum. */
export const ALGORITHM_NAMES = Object.keys(ALGORITHMS) as [Algorithm, ...Algorithm[]];

/** The model of a limit's algorithm with its figures. */
export function modelOf(l: AlgoLimit): AlgoModel {
  return algorithm(l.algorithm).model(l);
}

/** What the rules below read of a limit. */
export interface LimitShape extends AlgorithmSettings {
  algorithm: Algorithm;
  scope: string;
  shadow: boolean;
  costHeader?: string;
  /** `cost = { response = ... }`: charged what the origin reports; never leased nor cached (a debt comes after the refusal is cached). */
  responseCost?: ResponseSource & { max: number };
  tier?: string;
  /** Capacity kept for higher priorities (./priority.ts). */
  reserve?: Readonly<Record<string, number>>;
}

/** Whether a limit's refusals may be answered from the blocked-bucket cache: ones that hold until retry-after whatever comes. */
export function refusalCacheable(l: LimitShape): boolean {
  // split demand must see every attempt; a header cost may be smaller next time, a tier's rate larger
  return (
    !l.shadow &&
    l.scope !== "split" &&
    l.costHeader === undefined &&
    l.responseCost === undefined &&
    l.tier === undefined &&
    // a refusal of one priority says nothing of the next request's, which may rank higher
    l.reserve === undefined &&
    algorithm(l.algorithm).refusalHolds(l)
  );
}

/**
 * Whether a limit's shape allows leases: an algorithm whose every token admits one cost unit
 * whenever it is spent, with a fixed cost and no tier (a header cost or a tier's rate is decided
 * per request), and not `split` (its share moves), and without a `reserve` (a leased token would be
 * spent by whichever request comes, whatever its priority and the floor it must leave). Shadow
 * limits are not leased either (see src/features/rate-limit/isolate/lease-broker.ts).
 */
export function leasableShape(
  l: Pick<LimitShape, "algorithm" | "warmup" | "scope" | "costHeader" | "tier" | "reserve" | "responseCost">,
): boolean {
  const lease = algorithm(l.algorithm).lease;
  return (
    lease !== undefined &&
    lease.allowed(l) &&
    l.scope !== "split" &&
    l.costHeader === undefined &&
    l.responseCost === undefined &&
    l.tier === undefined &&
    l.reserve === undefined
  );
}

/** The leasable algorithms in words, for the configuration's error: "token_bucket (without warmup) and fixed_window". */
export function leasableAlgorithms(): string {
  const named = ALGORITHM_NAMES.flatMap((name) => {
    const lease = algorithm(name).lease;
    if (!lease) return [];
    return [lease.condition ? `${name} ${lease.condition}` : name];
  });
  return named.length > 1 ? `${named.slice(0, -1).join(", ")} and ${named.at(-1) as string}` : (named[0] ?? "");
}

/** Whether `name` is an algorithm whose entry has `trait` (a name the schema has not checked yet: no). */
export function hasTrait(name: string, trait: "inFlight" | "aligned" | "responseCost"): boolean {
  return Object.hasOwn(ALGORITHMS, name) && algorithm(name as Algorithm)[trait] === true;
}

/** The algorithms with `trait`, in words: "fixed_window". */
export function namesWith(trait: "inFlight" | "aligned" | "responseCost"): string {
  return ALGORITHM_NAMES.filter((name) => hasTrait(name, trait)).join(" or ");
}

/** The algorithms that read a setting, in words: "leaky_bucket". */
export function readersOf(setting: AlgorithmSetting): string {
  return ALGORITHM_NAMES.filter((name) => algorithm(name).settings.includes(setting)).join(" or ");
}

const MAX_EXACT = Number.MAX_SAFE_INTEGER;

/**
 * Buckets count tokens in units of period_us / gcd(period_us, rate), so the capacity in units,
 * burst × that, must be exact (a request's cost is at most the burst).
 */
function exactUnits(f: CountedFigures): ExactnessProblem | undefined {
  const periodUs = f.periodMs * 1000;
  if (f.burst * (periodUs / gcd(periodUs, f.rate)) > MAX_EXACT) {
    return {
      field: "burst",
      message: `burst ${f.burst} at rate ${f.rate} per ${f.periodMs} ms is too large to count exactly; use a shorter period or a rate that divides it`,
    };
  }
  return undefined;
}

/**
 * The sliding window compares prev × (P − elapsed) + (curr + cost) × P with rate × P (P the period
 * in ms), so rate × P must be exact; the fixed window counts only up to rate, but keeps the same
 * rule so a limit can move between the two window algorithms.
 */
function exactWindow(f: CountedFigures): ExactnessProblem | undefined {
  if (f.rate * f.periodMs > MAX_EXACT) {
    return {
      field: "rate",
      message: `rate ${f.rate} × period ${f.periodMs} ms is too large to count exactly; use a smaller rate or a shorter period`,
    };
  }
  return undefined;
}

/** A concurrency limit's bucket lists its live slots: at most MAX_IN_FLIGHT of them (an override's `rate` too). */
function exactInFlight(f: CountedFigures): ExactnessProblem | undefined {
  if (f.rate > MAX_IN_FLIGHT) {
    return {
      field: "rate",
      message: `${f.rate} in flight is more than a concurrency limit holds: at most ${MAX_IN_FLIGHT}`,
    };
  }
  return undefined;
}

/** A sliding log keeps a member per admitted request of a period, each of cost 1 at least: at most MAX_LOG_ENTRIES (an override's `rate` too). */
function exactLog(f: CountedFigures): ExactnessProblem | undefined {
  if (f.rate > MAX_LOG_ENTRIES) {
    return {
      field: "rate",
      message: `rate ${f.rate} is more than a sliding_log keeps: at most ${MAX_LOG_ENTRIES} per period (one entry per request); use sliding_window above that`,
    };
  }
  return exactWindow(f);
}

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}
