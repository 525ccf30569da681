import decideLua from "../../../../lua/decide.lua";
import type { Store } from "../../../store/redis.js";
import { overridesKeyOf, type OverrideInput } from "./overrides.js";
import { versionKeyOfBucket } from "../../../store/layout.js";
import { algorithm } from "../algorithms/registry.js";
import { ALGORITHM_COLUMNS, limitArgv, type DecideLimitArgs } from "./limit-columns.js";
import { windowColumn } from "../algorithms/zone-window.js";
import type { Bucket, LimitOutcome } from "../types.js";
import { scriptReply } from "../../../store/replies.js";

/** The script source, for `store.script()`. */
export const DECIDE_SCRIPT: string = decideLua;
/**
 * The same script flagged `no-writes`, for peeks (which write nothing): sent with EVAL_RO, which
 * Upstash can serve from a read replica and Redis refuses to let write anything, so a peek can
 * never spend a token by mistake.
 */
export const DECIDE_PEEK_SCRIPT: string = decideLua.replace(/^#!lua flags=/, "#!lua flags=no-writes,");

export { DECIDE_COMMANDS } from "./commands.js";

export type ScriptMode = "take" | "peek" | "refund" | "lease" | "return" | "release" | "settle";

/** A lease being closed: the epoch (token bucket) or window (fixed window) it was granted in, its tokens, and those never spent. */
export interface LeaseClose {
  epoch: number;
  granted: number;
  left: number;
}

/** What a call asks of a bucket's lease: tokens wanted (take, lease) and one lease to close (lease, return). */
export interface LeaseArgs {
  ask: number;
  close?: LeaseClose;
}

/** Tokens decide.lua debited for the caller's lease, for how long (ms of Redis time), and the epoch to close it with. */
export interface LeaseGrant {
  tokens: number;
  ms: number;
  epoch: number;
}

/** A bucket as the script call needs it; without `override`, no override applies (tests, bench); without `lease`, none is asked or closed. */
export type ScriptBucket = Pick<Bucket, "limit" | "key" | "split" | "params" | "slot" | "entry" | "delta"> & {
  override?: OverrideInput;
  lease?: LeaseArgs;
};

/** Figures decide.lua replies per limit (see the contract atop the script). */
const PER_LIMIT = 8;

/**
 * KEYS and ARGV of decide.lua for these buckets (all in one Redis, of one route); see the contract
 * atop the script. A bucket whose override is "read" adds the route's override hash to KEYS, and
 * the script reads every bucket's fields from it (one HMGET).
 */
export function scriptCall(buckets: ReadonlyArray<ScriptBucket>, mode: ScriptMode): { keys: string[]; args: string[] } {
  const keys = buckets.map((b) => b.key);
  const perLimit = buckets.flatMap((b) => limitArgv(limitArgs(b, keys)));
  const overrideIdx = overrideArg(buckets, keys);
  // last: the Redis's change counter, which the script reads in its MGET and returns
  keys.push(versionKeyOfBucket((buckets[0] as ScriptBucket).key));
  return { keys, args: [mode, buckets.length, overrideIdx, ...perLimit].map(String) };
}

/** One bucket's columns of decide.lua's ARGV; a split bucket's share and demand keys are added to `keys`, which the columns point at. */
function limitArgs(b: ScriptBucket, keys: string[]): DecideLimitArgs {
  const { limit: l, split, params, override, lease, slot, entry, delta } = b;
  const share_idx = split ? keys.push(split.shareKey) : 0;
  const demand_idx = split ? keys.push(split.demandKey) : 0;
  const p = params ?? l;
  const { rate, burst } = split?.start ?? p;
  const algo = algorithm(l.algorithm);
  const known = override === "read" ? undefined : override;
  const close = lease?.close ?? { epoch: 0, granted: 0, left: 0 };
  return {
    algo: algo.code,
    rate,
    period_us: p.period * 1000,
    burst,
    cost: p.cost,
    shadow: l.shadow ? 1 : 0,
    share_idx,
    demand_idx,
    override_all: known?.everybody ?? "",
    override_own: known?.own ?? "",
    lease_ask: lease?.ask ?? 0,
    lease_epoch: close.epoch,
    lease_granted: close.granted,
    lease_left: close.left,
    floor: floorAt(params?.floor ?? 0, algo.capacity === "burst" ? [p.burst, burst] : [p.rate, rate]),
    // the window by the isolate's clock; the script checks it against Redis's
    window: algo.aligned ? windowColumn(l.align, p.period, Date.now()) : "",
    ...ALGORITHM_COLUMNS,
    ...algo.columns(l, { slot, entry }),
    // read in "settle" mode only
    delta: delta ?? 0,
  };
}

/**
 * ARGV[3], pushing the route's override hash onto KEYS when the script may read it: "0" (the
 * values in ARGV, no check), "{idx}" (no copy: read it), "{idx}:{version}" (the values of a copy
 * read at that version of the Redis's change counter: read the hash only if it moved since).
 */
function overrideArg(buckets: ReadonlyArray<ScriptBucket>, keys: string[]): string | number {
  const reader = buckets.find((b) => b.override === "read");
  if (reader) return keys.push(overridesKeyOf(reader.key));
  const copied = buckets.find((b) => typeof b.override === "object" && b.override.version !== undefined);
  const version = typeof copied?.override === "object" ? copied.override.version : undefined;
  return copied && version !== undefined ? `${keys.push(overridesKeyOf(copied.key))}:${version}` : 0;
}

/**
 * The floor in terms of the capacity sent in ARGV (a split limit's starting share rather than the
 * full figures it was computed on), as decide.lua scales it for an override or a share.
 */
function floorAt(floor: number, [computedOn, sent]: [number, number]): number {
  return floor > 0 && sent !== computedOn && computedOn > 0 ? Math.ceil((floor * sent) / computedOn) : floor;
}

/** One call of decide.lua on one Redis: its verdict, an outcome and a lease grant per bucket, and when it went and came back (isolate clock). */
export interface GroupResult {
  store: Store;
  admitted: boolean;
  buckets: Bucket[];
  outcomes: LimitOutcome[];
  grants: LeaseGrant[];
  sentAt: number;
  receivedAt: number;
  /** The Redis's change counter (`{prefix}:version`) as the script read it. */
  version: number;
}

/** Runs decide.lua once for buckets that all live in one Redis. `leaseOf` gives each bucket's lease arguments (none by default). */
export async function runDecide(
  buckets: Bucket[],
  mode: ScriptMode,
  overrides: (b: Bucket) => OverrideInput,
  leaseOf: (b: Bucket) => LeaseArgs | undefined = () => undefined,
): Promise<GroupResult> {
  const store = (buckets[0] as Bucket).store;
  const { keys, args } = scriptCall(
    buckets.map((b) => ({ ...b, override: overrides(b), lease: leaseOf(b) })),
    mode,
  );
  const sentAt = Date.now();
  const reply = await store.run(store.script(mode === "peek" ? DECIDE_PEEK_SCRIPT : DECIDE_SCRIPT), keys, args);
  const receivedAt = Date.now();
  const numbers = asNumbers(reply, 2 + PER_LIMIT * buckets.length);
  const at = (i: number, j: number) => numbers[1 + PER_LIMIT * i + j] as number;
  const outcomes = buckets.map(({ limit, key, params, slot }, i): LimitOutcome => ({
    limit,
    key,
    cost: params?.cost ?? limit.cost,
    allowed: at(i, 0) === 1,
    remaining: at(i, 1),
    retryAfterMs: at(i, 2),
    resetMs: at(i, 3),
    delayMs: at(i, 4),
    // the slot a take holds (when allowed and admitted): what the request frees later
    ...(slot === undefined || mode !== "take" ? {} : { slot }),
  }));
  const grants = buckets.map((_, i): LeaseGrant => ({ tokens: at(i, 5), ms: at(i, 6), epoch: at(i, 7) }));
  const version = numbers[numbers.length - 1] as number;
  return { store, admitted: numbers[0] === 1, buckets, outcomes, grants, sentAt, receivedAt, version };
}

/** Buckets by the Redis that holds them, in first-seen order. */
export function groupByStore(buckets: Bucket[]): Bucket[][] {
  const groups = new Map<string, Bucket[]>();
  for (const b of buckets) {
    const g = groups.get(b.store.id);
    if (g) g.push(b);
    else groups.set(b.store.id, [b]);
  }
  return [...groups.values()];
}

function asNumbers(reply: unknown, length: number): number[] {
  return scriptReply(reply, "decide.lua", { length, each: (v) => typeof v === "number" }) as number[];
}
