import type { Config } from "../config/index.js";
import type { Defer } from "../util/defer.js";
import type { Stores } from "../region/index.js";
import type { DecisionHeader } from "../problem.js";
import { metricsKeys } from "../store/layout.js";
import type { Batch, Store } from "../store/redis.js";
import { latencyBucket } from "./histogram.js";
import type { ClientLabel } from "./labels.js";
import { idempotencyLines } from "./idempotency.js";
import { divertLines } from "./diverts.js";
import { sessionLines } from "./sessions.js";
import { mcpLines } from "./mcp.js";
export { asHash } from "../store/replies.js";

/** Counts go to Redis at most this often per isolate, the first time this long after the isolate started counting. */
export const FLUSH_EVERY_MS = 30_000;
const MINUTE_TTL_S = 2 * 3600;
const TOTAL_TTL_S = 30 * 86_400;
/** Each isolate renews the all-time hash's TTL on its first flush and then once a day, not on every flush. */
const TOTAL_RENEW_MS = 86_400_000;
/** Separates a figure's name from the isolate that counted it in the minute hashes' fields. */
export const ISOLATE_MARK = "@";

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

/** What this isolate has written of one minute: its figures so far (each flush writes them whole), and whether the hash's TTL is set. */
interface MinuteWritten {
  minute: number;
  figures: Map<string, number>;
  ttlSet: boolean;
}

/**
 * Decision counts of one isolate. Counts are batched and written with `ctx.waitUntil` at most
 * once per `FLUSH_EVERY_MS` (the first time that long after the isolate started counting, never
 * when nothing was counted), so a decision still costs one Redis round trip on its path and an
 * isolate with a trickle of traffic writes nothing for a while. A flush is one pipeline: one HSET
 * of this isolate's figures of the minute under its own field names (`{figure}@{isolate}`, its
 * cumulative counts in that minute, which the readers add up), one HINCRBY per all-time counter
 * that moved, the refused clients' ZINCRBY and labels only when some were refused, and an
 * EXPIRE only where this isolate writes a key for the first time (the all-time hash: once a day).
 */
export class MetricsBuffer {
  private pending = empty();
  /** When the first count waiting for a flush was seen (isolate clock); 0: nothing waits. */
  private since = 0;
  private written: MinuteWritten | undefined;
  private totalRenewedAt = 0;
  private name: string | undefined;

  /** This isolate's name in the minute hashes' fields (drawn at the first flush: Workers refuse random values at startup). */
  get isolate(): string {
    this.name ??= crypto.randomUUID().replace(/-/g, "").slice(0, 12);
    return this.name;
  }

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

  /**
   * Flushes when an interval has passed since the first count waiting (or at once when `force`d,
   * as the metrics endpoint does). Under `metrics = "off"` nothing is written, and the counts are dropped.
   */
  flush(
    config: Pick<Config, "key_prefix"> & Partial<Pick<Config, "metrics">>,
    stores: Stores,
    defer: Defer,
    force = false,
  ): Promise<void> | undefined {
    const now = Date.now();
    if (this.pending.counts.size === 0 && this.pending.regional.size === 0 && this.pending.rttCount === 0)
      return undefined;
    if (this.since === 0) this.since = now;
    if (config.metrics === "off") {
      this.pending = empty();
      this.since = 0;
      return undefined;
    }
    if (!force && now - this.since < FLUSH_EVERY_MS) return undefined;
    const batch = this.pending;
    this.pending = empty();
    this.since = 0;
    const store = stores.offPath();
    if (!store) return undefined;
    const done = this.send(store, config.key_prefix, batch, now);
    defer(done);
    return done;
  }

  /** Writes one batch: its minute's figures whole, the all-time counters' increments, the refused clients. */
  private send(store: Store, prefix: string, batch: Pending, now: number): Promise<void> {
    const minute = minuteOf(now);
    if (this.written?.minute !== minute) this.written = { minute, figures: new Map(), ttlSet: false };
    const written = this.written;
    for (const [field, n] of minuteFigures(batch)) add(written.figures, field, n);
    const renewTotal = now - this.totalRenewedAt >= TOTAL_RENEW_MS;
    const fields = Object.fromEntries(
      [...written.figures].map(([field, n]) => [`${field}${ISOLATE_MARK}${this.isolate}`, String(n)]),
    );
    const plan = { fields, minuteTtl: !written.ttlSet, renewTotal };
    return store
      .pipeline((p) => write(p, metricsKeys(prefix, minute), batch, plan))
      .then(
        () => {
          written.ttlSet = true;
          if (renewTotal) this.totalRenewedAt = now;
        },
        () => undefined, // metrics are best effort: a lost batch never fails a request
      );
  }
}

/** A batch's figures of the minute hash: the decision counts, the round trips, the region figures. */
function minuteFigures(batch: Pending): Map<string, number> {
  const figures = new Map(batch.counts);
  if (batch.rttCount > 0) {
    add(figures, "rtt_sum_ms", Math.round(batch.rttSum));
    add(figures, "rtt_count", batch.rttCount);
  }
  for (const [field, n] of batch.regional) add(figures, field, n);
  return figures;
}

/** One flush's commands, sent as one pipeline. */
function write(
  p: Batch,
  k: ReturnType<typeof metricsKeys>,
  batch: Pending,
  plan: { fields: Record<string, string>; minuteTtl: boolean; renewTotal: boolean },
): void {
  p.hset(k.minute, plan.fields);
  if (plan.minuteTtl) p.expire(k.minute, MINUTE_TTL_S);
  for (const [field, n] of batch.counts) p.hincrby(k.total, field, n);
  if (plan.renewTotal) p.expire(k.total, TOTAL_TTL_S);
  if (batch.blocked.size > 0) {
    for (const [member, n] of batch.blocked) p.zincrby(k.blocked, n, member);
    p.expire(k.blocked, MINUTE_TTL_S);
  }
  if (batch.labels.size > 0) {
    p.hset(k.labels, Object.fromEntries(batch.labels));
    p.expire(k.labels, MINUTE_TTL_S);
  }
}

/**
 * A minute hash as its readers want it, figure → count: the isolates' fields
 * (`{figure}@{isolate}`) added up by figure; a field without an isolate is taken as it is.
 */
export function collapseIsolates(hash: Record<string, string>): Record<string, string> {
  const sums = new Map<string, number>();
  for (const [field, value] of Object.entries(hash)) {
    const at = field.lastIndexOf(ISOLATE_MARK);
    add(sums, at < 0 ? field : field.slice(0, at), Number(value));
  }
  return Object.fromEntries([...sums].map(([field, n]) => [field, String(n)]));
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
  lines.push(...sessionLines(total, esc));
  lines.push(...mcpLines(total, esc));
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
