import type { Config } from "../config/index.js";
import type { Env } from "../env.js";
import type { Defer } from "../limiter/decide.js";
import { offPathStore } from "../region/index.js";
import type { DecisionHeader } from "../shed/problem.js";
export { asHash } from "../store/replies.js";

const FLUSH_EVERY_MS = 5_000;
const MINUTE_TTL_S = 2 * 3600;
const TOTAL_TTL_S = 30 * 86_400;

/** Counts kept in isolate memory between flushes: `route|limit|decision` → n, and Redis round trips. */
let pending = { counts: new Map<string, number>(), blocked: new Map<string, number>(), rttSum: 0, rttCount: 0 };
let lastFlush = 0;

export const minuteOf = (ms: number) => Math.floor(ms / 60_000);
export const metricKeys = (prefix: string, minute?: number) => ({
  minute: `${prefix}:metrics:m:${minute ?? ""}`,
  blocked: `${prefix}:metrics:blocked:${minute ?? ""}`,
  total: `${prefix}:metrics:total`,
});

/**
 * Counts one decision. `limit` is the limit that decided it (the refusing one), or "-" when no
 * single limit did; `blockedId` is the hashed identifier of a refused bucket (for the dashboard's
 * top blocked list). Counts are batched per isolate and written with `ctx.waitUntil` at most every
 * five seconds, so a decision still costs one Redis round trip on its path.
 */
export function count(route: string, limit: string, decision: DecisionHeader, extra: { rttMs?: number; blockedId?: string } = {}): void {
  const field = `${route}|${limit}|${decision}`;
  pending.counts.set(field, (pending.counts.get(field) ?? 0) + 1);
  if (extra.rttMs !== undefined) {
    pending.rttSum += extra.rttMs;
    pending.rttCount++;
  }
  if (extra.blockedId) pending.blocked.set(`${route}|${extra.blockedId}`, (pending.blocked.get(`${route}|${extra.blockedId}`) ?? 0) + 1);
}

/** Flushes when the interval has passed (or when `force`d, as the metrics endpoint does). */
export function maybeFlush(config: Config, env: Env, defer: Defer, force = false): Promise<void> | undefined {
  const now = Date.now();
  if (!force && now - lastFlush < FLUSH_EVERY_MS) return undefined;
  if (pending.counts.size === 0 && pending.rttCount === 0) return undefined;
  lastFlush = now;
  const batch = pending;
  pending = { counts: new Map(), blocked: new Map(), rttSum: 0, rttCount: 0 };
  const store = offPathStore(env, config);
  if (!store) return undefined;
  const k = metricKeys(config.key_prefix, minuteOf(now));
  const p = store.redis.pipeline();
  for (const [field, n] of batch.counts) {
    p.hincrby(k.minute, field, n);
    p.hincrby(k.total, field, n);
  }
  if (batch.rttCount > 0) {
    p.hincrby(k.minute, "rtt_sum_ms", Math.round(batch.rttSum));
    p.hincrby(k.minute, "rtt_count", batch.rttCount);
  }
  for (const [member, n] of batch.blocked) p.zincrby(k.blocked, n, member);
  p.expire(k.minute, MINUTE_TTL_S);
  p.expire(k.blocked, MINUTE_TTL_S);
  p.expire(k.total, TOTAL_TTL_S);
  const done = p.exec().then(
    () => undefined,
    () => undefined, // metrics are best effort: a lost batch never fails a request
  );
  defer(done);
  return done;
}

/** The all-time counters and the last minute's round-trip time, in the Prometheus text format. */
export function prometheus(total: Record<string, string | number>, lastMinute: Record<string, string | number>): string {
  const lines = ["# HELP sluice_decisions_total Decisions by route, deciding limit and outcome.", "# TYPE sluice_decisions_total counter"];
  for (const [field, n] of Object.entries(total).sort()) {
    const [route, limit, decision] = field.split("|");
    if (!decision) continue;
    lines.push(`sluice_decisions_total{route="${esc(route)}",limit="${esc(limit)}",decision="${esc(decision)}"} ${Number(n)}`);
  }
  const sum = Number(lastMinute.rtt_sum_ms ?? 0);
  const cnt = Number(lastMinute.rtt_count ?? 0);
  lines.push("# HELP sluice_redis_rtt_milliseconds Mean Redis round trip of decisions in the current minute.", "# TYPE sluice_redis_rtt_milliseconds gauge");
  lines.push(`sluice_redis_rtt_milliseconds ${cnt ? (sum / cnt).toFixed(3) : "0"}`);
  lines.push("# HELP sluice_redis_round_trips Decisions that went to Redis in the current minute.", "# TYPE sluice_redis_round_trips gauge");
  lines.push(`sluice_redis_round_trips ${cnt}`);
  return lines.join("\n") + "\n";
}

function esc(v: string | undefined): string {
  return (v ?? "").replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}
