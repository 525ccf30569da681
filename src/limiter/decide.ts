import decideLua from "../../lua/decide.lua";
import type { Limit } from "../config/index.js";
import type { Share } from "../region/shares.js";
import { StoreError } from "../store/deadline.js";
import type { Store } from "../store/redis.js";
import type { BlockedBuckets } from "./blocked.js";
import { overrideInput, overridesKeyOf, refreshOverrides, type OverrideInput } from "./overrides.js";
import type { Decision, LimitOutcome } from "./types.js";

/** The figures one request is decided with: the limit's, or its tier's, and the request's cost. */
export interface BucketParams {
  rate: number;
  /** ms */
  period: number;
  burst: number;
  cost: number;
}

/** One bucket a request falls into, and the Redis that holds it. */
export interface Bucket {
  limit: Limit;
  key: string;
  store: Store;
  /** Defaults to the limit's own rate, period, burst and cost. */
  params?: BucketParams;
  /** `split` limits: where this region's share and demand are kept, and the share to use before the first rebalance. */
  split?: { shareKey: string; demandKey: string; start: Share };
}

export type ScriptMode = "take" | "peek" | "refund";

/** Work that may finish after the response (`ctx.waitUntil`). */
export type Defer = (work: Promise<unknown>) => void;

/**
 * Decides a request against every limit of its route: one EVALSHA of `lua/decide.lua` per Redis
 * involved (the region's, and the home region's for `global` limits), sent in parallel, each
 * all-or-nothing. When one Redis admits and another refuses, what the first charged is refunded
 * (deferred: the client does not wait for it), so a refused request keeps nothing anywhere.
 * Buckets known to be closed are answered from `blocked` without calling Redis at all.
 * Runtime overrides come from the isolate's copy (src/limiter/overrides.ts), refreshed in the
 * background (`defer`), never read on the request path unless the copy is too old.
 * Throws `StoreError` when a Redis fails; the caller applies `on_store_error`.
 *
 * @example
 * const d = await decide(buckets, blocked, Date.now(), (p) => ctx.waitUntil(p));
 * if (d.verdict === "reject") return tooManyRequests(d.blocking);
 */
export async function decide(buckets: Bucket[], blocked: BlockedBuckets, now: number, defer: Defer, mode: "take" | "peek" = "take"): Promise<Decision> {
  // before the cache answers: a client held by it must not keep its route's copy from refreshing,
  // and a changed override reopens the route's buckets this isolate holds as closed
  refreshOverrides(buckets, now, defer, (routePrefix) => blocked.forgetRoute(routePrefix));
  const cached = mode === "take" ? fromCache(buckets, blocked, now) : undefined;
  if (cached) return cached;

  const overrides = (b: Bucket) => overrideInput(b, now);
  const groups = groupByStore(buckets);
  const settled = await Promise.allSettled(groups.map((g) => runDecide(g, mode, overrides)));
  const results = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
  const admitted = !failed && results.every((r) => r.admitted);
  if (!admitted && mode === "take") {
    for (const r of results) if (r.admitted) defer(refund(r, overrides).catch(() => undefined));
  }
  if (failed) throw failed.reason instanceof StoreError ? failed.reason : new StoreError("error", String(failed.reason));

  const byBucket = new Map(results.flatMap((r) => r.buckets.map((b, i) => [b, r.outcomes[i] as LimitOutcome] as const)));
  const outcomes = buckets.map((b) => byBucket.get(b) as LimitOutcome);
  const refusing = outcomes.filter((o) => !o.allowed && !o.limit.shadow);
  if (!admitted) {
    if (mode === "take") for (const o of refusing) if (o.retryAfterMs > 0 && cacheable(o)) blocked.block(o.key, now + o.retryAfterMs, now);
    return { verdict: "reject", outcomes, blocking: longestWait(refusing.length > 0 ? refusing : outcomes), cached: false };
  }
  return { verdict: outcomes.some((o) => !o.allowed) ? "shadow" : "allow", outcomes };
}

/**
 * Gives back what an admitted decision charged, e.g. for a request answered by a replay: the
 * request never reached the origin, so it should cost its client nothing.
 */
export async function giveBack(buckets: Bucket[], d: Decision): Promise<void> {
  if (d.verdict === "reject") return;
  const charged = buckets.filter((b) => d.outcomes.find((o) => o.key === b.key && o.limit === b.limit)?.allowed);
  const now = Date.now();
  await Promise.all(groupByStore(charged).map((g) => runDecide(g, "refund", (b) => overrideInput(b, now))));
}

/** One bucket's state as it stands, nothing spent (for the admin API: its overrides read live, in the script). */
export async function peekBucket(bucket: Bucket): Promise<LimitOutcome> {
  return (await runDecide([bucket], "peek", () => "read")).outcomes[0] as LimitOutcome;
}

/** The script source, for `store.script()`. */
export const DECIDE_SCRIPT: string = decideLua;

/** A bucket as the script call needs it; without `override`, no override applies (tests, bench). */
export type ScriptBucket = Pick<Bucket, "limit" | "key" | "split" | "params"> & { override?: OverrideInput };

/**
 * KEYS and ARGV of decide.lua for these buckets (all in one Redis, of one route); see the contract
 * atop the script. A bucket whose override is "read" adds the route's override hash to KEYS, and
 * the script reads every bucket's fields from it (one HMGET).
 */
export function scriptCall(buckets: ReadonlyArray<ScriptBucket>, mode: ScriptMode): { keys: string[]; args: string[] } {
  const keys = buckets.map((b) => b.key);
  const perLimit: Array<string | number> = [];
  for (const { limit: l, split, params, override } of buckets) {
    let share = 0;
    let demand = 0;
    if (split) {
      share = keys.push(split.shareKey);
      demand = keys.push(split.demandKey);
    }
    const p = params ?? l;
    const { rate, burst } = split?.start ?? p;
    const [p1, p2] = l.algorithm === "token_bucket" ? [(l.warmup ?? 0) * 1000, 0] : l.algorithm === "leaky_bucket" ? [l.max_delay * 1000, l.nodelay ? 1 : 0] : [0, 0];
    const known = override === "read" ? undefined : override;
    perLimit.push(ALGORITHM_CODE[l.algorithm], rate, p.period * 1000, burst, p.cost, l.shadow ? 1 : 0, share, demand, p1, p2, known?.everybody ?? "", known?.own ?? "");
  }
  const reader = buckets.find((b) => b.override === "read");
  const overrideIdx = reader ? keys.push(overridesKeyOf(reader.key)) : 0;
  return { keys, args: [mode, buckets.length, overrideIdx, ...perLimit].map(String) };
}

const ALGORITHM_CODE: Record<Limit["algorithm"], number> = { token_bucket: 1, leaky_bucket: 2, fixed_window: 3, sliding_window: 4 };

/** Outcomes that may be answered from the blocked-bucket cache: ones whose refusal holds until retry-after whatever comes. */
function cacheable(b: Pick<Bucket, "limit">): boolean {
  const l = b.limit;
  // split demand must see every attempt; warm-up retry-afters are estimates; a header cost may be smaller next time
  return !l.shadow && l.scope !== "split" && l.warmup === undefined && l.costHeader === undefined && l.tier === undefined;
}

interface GroupResult {
  store: Store;
  admitted: boolean;
  buckets: Bucket[];
  outcomes: LimitOutcome[];
}

async function runDecide(buckets: Bucket[], mode: ScriptMode, overrides: (b: Bucket) => OverrideInput): Promise<GroupResult> {
  const store = (buckets[0] as Bucket).store;
  const { keys, args } = scriptCall(buckets.map((b) => ({ ...b, override: overrides(b) })), mode);
  const reply = await store.run(store.script(DECIDE_SCRIPT), keys, args);
  const numbers = asNumbers(reply, 1 + 5 * buckets.length);
  const outcomes = buckets.map(({ limit, key, params }, i): LimitOutcome => ({
    limit,
    key,
    cost: params?.cost ?? limit.cost,
    allowed: numbers[1 + 5 * i] === 1,
    remaining: numbers[2 + 5 * i] as number,
    retryAfterMs: numbers[3 + 5 * i] as number,
    resetMs: numbers[4 + 5 * i] as number,
    delayMs: numbers[5 + 5 * i] as number,
  }));
  return { store, admitted: numbers[0] === 1, buckets, outcomes };
}

/** Gives back what an admitted group charged, when another Redis vetoed the request. */
async function refund(group: GroupResult, overrides: (b: Bucket) => OverrideInput): Promise<void> {
  const charged = group.buckets.filter((_, i) => group.outcomes[i]?.allowed);
  if (charged.length > 0) await runDecide(charged, "refund", overrides);
}

function groupByStore(buckets: Bucket[]): Bucket[][] {
  const groups = new Map<string, Bucket[]>();
  for (const b of buckets) {
    const g = groups.get(b.store.id);
    if (g) g.push(b);
    else groups.set(b.store.id, [b]);
  }
  return [...groups.values()];
}

function fromCache(buckets: Bucket[], blocked: BlockedBuckets, now: number): Decision | undefined {
  const outcomes: LimitOutcome[] = [];
  for (const b of buckets) {
    if (!cacheable(b)) continue;
    const wait = blocked.remaining(b.key, now);
    if (wait > 0) outcomes.push({ limit: b.limit, key: b.key, cost: b.limit.cost, allowed: false, remaining: 0, retryAfterMs: wait, resetMs: wait, delayMs: 0 });
  }
  if (outcomes.length === 0) return undefined;
  return { verdict: "reject", outcomes, blocking: longestWait(outcomes), cached: true };
}

/** The refusal that lasts longest is the honest Retry-After: the request needs every limit. */
export function longestWait(outcomes: LimitOutcome[]): LimitOutcome {
  return outcomes.reduce((a, b) => (b.retryAfterMs < 0 || (a.retryAfterMs >= 0 && b.retryAfterMs > a.retryAfterMs) ? b : a));
}

function asNumbers(reply: unknown, length: number): number[] {
  if (!Array.isArray(reply) || reply.length !== length || !reply.every((v) => typeof v === "number")) {
    throw new StoreError("error", `unexpected reply from decide.lua: ${JSON.stringify(reply).slice(0, 200)}`);
  }
  return reply as number[];
}
