import type { Config } from "../config/index.js";
import type { Defer } from "../util/defer.js";
import type { Stores } from "../region/index.js";
import type { DecisionHeader } from "../problem.js";
import { metricsKeys } from "../store/layout.js";
import type { Batch } from "../store/redis.js";
import { latencyBucket } from "./histogram.js";
import type { ClientLabel } from "./labels.js";
import { idempotencyLines } from "./idempotency.js";
import { divertLines } from "./diverts.js";
export { asHash } from "../store/replies.js";

const FLUSH_EVERY_MS = 5_000;
const MINUTE_TTL_S = 2 * 3600;
const TOTAL_TTL_S = 30 * 86_400;

export const minuteOf = (ms: number) => Math.floor(ms / 60_000);

/**
 * Counts kept in isolate memory between flushes: `route|limit|decision` → n (per minute and all
 * time), the region figures (per minute only: the dashboard reads them, nothing else), refused
 * identifiers with their labels, and Redis round trips.
 */
interface Pending {
  counts: Map<string, number>;
  regional: Map<string, number>;
  blocked: Map<string, number>;
  labels: Map<string, string>;
  rttSum: number;
  rttCount: number;
}

/** How the counts of bans start, apart from those of decisions. */
const BAN_FIELD = "ban:";

/**
 * The region figures' fields, in the minute's hash beside the decision counts: `region:{region}|{decision}`,
 * `region:{region}|local` (decided in the isolate while Redis was fine: a lease, the blocked-bucket
 * cache), `region:{region}|store-failed` (decided without Redis because it failed) and
 * `rtt:{region}|{bucket}` (the round trip's histogram bucket, src/metrics/histogram.ts). Each has
 * two parts, so readers of `route|limit|decision` pass over them, and a route name never holds a colon.
 */
export const REGION_FIELD = "region:";
export const RTT_FIELD = "rtt:";
export const LOCAL = "local";
export const STORE_FAILED = "store-failed";
/** A label's field is `route|id`; the deny entry a ban from its row would write, `entry:route|id`. */
export const ENTRY_FIELD = "entry:";

/** What else one decision is counted with. */
export interface CountExtra {
  rttMs?: number;
  /** The hashed identifier of a refused bucket (for the dashboard's top blocked list). */
  blockedId?: string;
  /** Its display label and deny entry (none under `labels = "off"`). */
  label?: ClientLabel;
  /** The region that decided. */
  region?: string;
  /** Decided by the isolate without a round trip while Redis was fine (a lease, the blocked-bucket cache). */
  local?: boolean;
  /** Decided without Redis because it failed (fail open, or the isolate's own buckets). */
  storeFailed?: boolean;
}

const empty = (): Pending => ({
  counts: new Map(),
  regional: new Map(),
  blocked: new Map(),
  labels: new Map(),
  rttSum: 0,
  rttCount: 0,
});

const add = (map: Map<string, number>, field: string, n = 1) => map.set(field, (map.get(field) ?? 0) + n);

/**
 * Decision counts of one isolate. Counts are batched and written with `ctx.waitUntil` at most
 * every five seconds, so a decision still costs one Redis round trip on its path.
 */
export class MetricsBuffer {
  private pending = empty();
  private lastFlush = 0;

  /**
   * Counts one decision. `limit` is the limit that decided it (the refusing one), or "-" when no
   * single limit did; `extra` says where and how it was decided, and who was refused.
   */
  count(route: string, limit: string, decision: DecisionHeader, extra: CountExtra = {}): void {
    const p = this.pending;
    add(p.counts, `${route}|${limit}|${decision}`);
    if (extra.rttMs !== undefined) {
      p.rttSum += extra.rttMs;
      p.rttCount++;
    }
    if (extra.region !== undefined) this.countRegion(extra.region, decision, extra);
    if (!extra.blockedId) return;
    const blocked = `${route}|${extra.blockedId}`;
    add(p.blocked, blocked);
    // the label goes in a hash value, never in a key name or a sorted set's member
    if (extra.label) p.labels.set(blocked, extra.label.label);
    if (extra.label?.entry) p.labels.set(ENTRY_FIELD + blocked, extra.label.entry);
  }

  private countRegion(region: string, decision: DecisionHeader, extra: CountExtra): void {
    const regional = this.pending.regional;
    add(regional, `${REGION_FIELD}${region}|${decision}`);
    if (extra.local) add(regional, `${REGION_FIELD}${region}|${LOCAL}`);
    if (extra.storeFailed) add(regional, `${REGION_FIELD}${region}|${STORE_FAILED}`);
    if (extra.rttMs !== undefined) add(regional, `${RTT_FIELD}${region}|${latencyBucket(extra.rttMs)}`);
  }

  /**
   * Counts one automatic ban (docs/operating.md, Bans) by the route and limit that banned, under a field of
   * two parts (`ban:{route}|{limit}`): readers of the decision counts (`route|limit|decision`)
   * pass over it, and a route name never holds a colon, so it is never a route's.
   */
  countBan(route: string, limit: string): void {
    const field = `${BAN_FIELD}${route}|${limit}`;
    this.pending.counts.set(field, (this.pending.counts.get(field) ?? 0) + 1);
  }

  /**
   * Adds `n` to a field of two parts (`{kind}:{route}|{what}`) of the per-minute and all-time
   * hashes: the idempotency figures (src/metrics/idempotency.ts).
   */
  countField(field: string, n = 1): void {
    add(this.pending.counts, field, n);
  }

  /** Flushes when the interval has passed (or when `force`d, as the metrics endpoint does). */
  flush(config: Pick<Config, "key_prefix">, stores: Stores, defer: Defer, force = false): Promise<void> | undefined {
    const now = Date.now();
    if (!force && now - this.lastFlush < FLUSH_EVERY_MS) return undefined;
    if (this.pending.counts.size === 0 && this.pending.regional.size === 0 && this.pending.rttCount === 0)
      return undefined;
    this.lastFlush = now;
    const batch = this.pending;
    this.pending = empty();
    const store = stores.offPath();
    if (!store) return undefined;
    const keys = metricsKeys(config.key_prefix, minuteOf(now));
    const done = store
      .pipeline((p) => write(p, keys, batch))
      .then(
        () => undefined,
        () => undefined, // metrics are best effort: a lost batch never fails a request
      );
    defer(done);
    return done;
  }
}

/** One flush's commands, sent as one pipeline. */
function write(p: Batch, k: ReturnType<typeof metricsKeys>, batch: Pending): void {
  for (const [field, n] of batch.counts) {
    p.hincrby(k.minute, field, n);
    p.hincrby(k.total, field, n);
  }
  if (batch.rttCount > 0) {
    p.hincrby(k.minute, "rtt_sum_ms", Math.round(batch.rttSum));
    p.hincrby(k.minute, "rtt_count", batch.rttCount);
  }
  for (const [field, n] of batch.regional) p.hincrby(k.minute, field, n);
  for (const [member, n] of batch.blocked) p.zincrby(k.blocked, n, member);
  if (batch.labels.size > 0) {
    p.hset(k.labels, Object.fromEntries(batch.labels));
    p.expire(k.labels, MINUTE_TTL_S);
  }
  p.expire(k.minute, MINUTE_TTL_S);
  p.expire(k.blocked, MINUTE_TTL_S);
  p.expire(k.total, TOTAL_TTL_S);
}

/** The all-time counters and the last minute's round-trip time, in the Prometheus text format. */
export function prometheus(
  total: Record<string, string | number>,
  lastMinute: Record<string, string | number>,
): string {
  const lines = [
    "# HELP sluice_decisions_total Decisions by route, deciding limit and outcome.",
    "# TYPE sluice_decisions_total counter",
  ];
  for (const [field, n] of Object.entries(total).sort()) {
    const [route, limit, decision] = field.split("|");
    if (!decision) continue;
    lines.push(
      `sluice_decisions_total{route="${esc(route)}",limit="${esc(limit)}",decision="${esc(decision)}"} ${Number(n)}`,
    );
  }
  lines.push(...banLines(total));
  lines.push(...idempotencyLines(total, esc));
  lines.push(...divertLines(total, esc));
  const sum = Number(lastMinute.rtt_sum_ms ?? 0);
  const cnt = Number(lastMinute.rtt_count ?? 0);
  lines.push(
    "# HELP sluice_redis_rtt_milliseconds Mean Redis round trip of decisions in the current minute.",
    "# TYPE sluice_redis_rtt_milliseconds gauge",
  );
  lines.push(`sluice_redis_rtt_milliseconds ${cnt ? (sum / cnt).toFixed(3) : "0"}`);
  lines.push(
    "# HELP sluice_redis_round_trips Decisions that went to Redis in the current minute.",
    "# TYPE sluice_redis_round_trips gauge",
  );
  lines.push(`sluice_redis_round_trips ${cnt}`);
  return lines.join("\n") + "\n";
}

/** `sluice_bans_total`: the clients put on the deny list automatically, by the route and limit that banned them. */
function banLines(total: Record<string, string | number>): string[] {
  const lines = [
    "# HELP sluice_bans_total Clients put on the deny list by a limit's ban, by route and limit.",
    "# TYPE sluice_bans_total counter",
  ];
  for (const [field, n] of Object.entries(total).sort()) {
    if (!field.startsWith(BAN_FIELD)) continue;
    const [route, limit] = field.slice(BAN_FIELD.length).split("|");
    lines.push(`sluice_bans_total{route="${esc(route)}",limit="${esc(limit)}"} ${Number(n)}`);
  }
  return lines;
}

function esc(v: string | undefined): string {
  return (v ?? "").replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}
