/*
 * The figures of the dashboard's panels beside the charts (docs/operating.md: "How each panel is
 * computed"), read from the per-minute metrics hashes dashboardData has already fetched, and from
 * each region's adaptive state. Nothing here makes a decision: it only reads what isolates wrote.
 */
import { bucketBound, QUANTILES } from "../metrics/histogram.js";
import type { Config, Route } from "../config/index.js";
import { ADAPTIVE_LIMIT } from "../features/rate-limit/adaptive/schema.js";
import { identify } from "../identity/identify.js";
import { bucketHash } from "../features/rate-limit/decision/buckets.js";
import { LOCAL, REGION_FIELD, RTT_FIELD, STORE_FAILED } from "../metrics/index.js";
import { readLabels } from "../metrics/reads.js";
import type { DecisionHeader } from "../problem.js";
import { allRegions, type Stores } from "../region/index.js";
import { adaptiveStateKey, bucketKey } from "../store/layout.js";
import type { DashboardData } from "./dashboard-data.js";
import { factsFromParams } from "../features/rate-limit/admin-identity.js";
import { orElse } from "../util/log.js";

type RouteFigures = DashboardData["routes"][number];
type RegionFigures = DashboardData["regions"][number];
type Blocked = DashboardData["top_blocked"][number];
/** One minute's metrics hash, as HGETALL gives it. */
type MinuteCounts = Record<string, string | number>;

/** Every verdict, so a region's `per_second` has the same keys whatever it decided. */
const VERDICTS: readonly DecisionHeader[] = [
  "allow",
  "reject",
  "fallback",
  "queued",
  "replay",
  "shadow",
  "diverted",
  "degraded",
];

/** The region panel's window: the current minute and the four before it. */
const RECENT_MINUTES = 5;

/**
 * Each limit's decisions over the hour (`route|limit|decision`; `-` holds the requests no limit
 * refused), split as the chart splits them, and the bans the route's limits gave (`ban:route|limit`).
 */
export function hourOfRoute(
  route: string,
  hour: readonly MinuteCounts[],
  allowed: ReadonlySet<string>,
): Pick<RouteFigures, "limits" | "bans"> {
  const limits = new Map<string, { limit: string; allowed: number; shed: number }>();
  let bans = 0;
  for (const counts of hour)
    for (const [field, n] of Object.entries(counts)) {
      const [r, limit, decision] = field.split("|");
      if (r === `ban:${route}`) bans += Number(n);
      if (r !== route || limit === undefined || decision === undefined) continue;
      const row = limits.get(limit) ?? { limit, allowed: 0, shed: 0 };
      row[allowed.has(decision) ? "allowed" : "shed"] += Number(n);
      limits.set(limit, row);
    }
  return { limits: [...limits.values()].sort((a, b) => a.limit.localeCompare(b.limit)), bans };
}

/**
 * Per region: decisions per second by verdict and the share decided locally over the last five
 * minutes (the current one only as far as it has gone), the round trip's p50 and p99 from their
 * histogram over the same minutes, and the seconds of the hour spent degraded: each minute counts
 * its 60 s times the share of its decisions made without Redis because Redis failed.
 */
export function regionFigures(config: Config, hour: readonly MinuteCounts[], nowMs: number): RegionFigures[] {
  const recent = hour.slice(-RECENT_MINUTES);
  const seconds = (RECENT_MINUTES - 1) * 60 + (nowMs % 60_000) / 1000;
  return allRegions(config).map((region) => {
    const recentCounts = recent.map((m) => regionMinute(m, region));
    const decided = recentCounts.reduce((s, m) => s + m.total, 0);
    const per_second = Object.fromEntries(
      VERDICTS.map((v) => [v, round(recentCounts.reduce((s, m) => s + (m.verdicts.get(v) ?? 0), 0) / seconds, 3)]),
    );
    const rtt = new Map<number, number>();
    for (const m of recentCounts) for (const [b, n] of m.rtt) rtt.set(b, (rtt.get(b) ?? 0) + n);
    const degraded = hour.map((m) => regionMinute(m, region)).map((m) => (m.total ? (60 * m.failed) / m.total : 0));
    return {
      region,
      window_minutes: RECENT_MINUTES,
      per_second,
      rtt_p50_ms: quantile(rtt, 0.5),
      rtt_p99_ms: quantile(rtt, 0.99),
      local_share: decided ? round(recentCounts.reduce((s, m) => s + m.local, 0) / decided, 3) : 0,
      degraded_seconds: Math.round(degraded.reduce((s, x) => s + x, 0)),
    };
  });
}

interface RegionMinute {
  verdicts: Map<string, number>;
  total: number;
  local: number;
  failed: number;
  rtt: Map<number, number>;
}

/** One region's fields of one minute: `region:{region}|…` and `rtt:{region}|{bucket}`. */
function regionMinute(counts: MinuteCounts, region: string): RegionMinute {
  const m: RegionMinute = { verdicts: new Map(), total: 0, local: 0, failed: 0, rtt: new Map() };
  const own = `${REGION_FIELD}${region}|`;
  const rtt = `${RTT_FIELD}${region}|`;
  for (const [field, value] of Object.entries(counts)) {
    const n = Number(value);
    if (field.startsWith(rtt)) m.rtt.set(Number(field.slice(rtt.length)), n);
    if (!field.startsWith(own)) continue;
    const what = field.slice(own.length);
    if (what === LOCAL) m.local += n;
    else if (what === STORE_FAILED) m.failed += n;
    else {
      m.verdicts.set(what, n);
      m.total += n;
    }
  }
  return m;
}

/** The upper bound (ms) of the histogram bucket holding quantile `q`, as adaptive.lua reads its own; `null` when empty. */
export function quantile(histogram: ReadonlyMap<number, number>, q: number): number | null {
  const buckets = [...histogram].filter(([, n]) => n > 0).sort((a, b) => a[0] - b[0]);
  const total = buckets.reduce((s, [, n]) => s + n, 0);
  if (total === 0) return null;
  let seen = 0;
  for (const [bucket, n] of buckets) {
    seen += n;
    if (seen >= q * total) return round(bucketBound(bucket), 2);
  }
  return round(bucketBound(buckets[buckets.length - 1]![0]), 2);
}

/**
 * The live slots of a concurrency bucket (decide.lua's `c:{id}@{expiry_us},…`) at `nowMs` on this
 * clock: an approximation of Redis's, good enough for a panel (the script itself drops expired ones).
 */
export function liveSlots(value: unknown, nowMs: number): number {
  if (typeof value !== "string" || !value.startsWith("c:")) return 0;
  return value
    .slice(2)
    .split(",")
    .filter((slot) => Number(slot.slice(slot.lastIndexOf("@") + 1)) > nowMs * 1000).length;
}

/**
 * Each adaptive route's limit in every region, from the region's own Redis: the limit in force
 * (half of it while a probe window runs), the latency of the current window at the route's
 * percentile (`null` before it has responses) and the unloaded latency it learnt. A region whose
 * Redis does not answer, or that holds no state yet, is left out.
 */
export async function adaptiveFigures(config: Config, stores: Stores): Promise<Map<string, RouteFigures["adaptive"]>> {
  const figures = new Map<string, RouteFigures["adaptive"]>();
  const routes = config.routes.filter((r) => r.adaptive);
  await Promise.all(
    routes.map(async (route) => {
      const rows = await Promise.all(allRegions(config).map((region) => adaptiveRow(config, stores, route, region)));
      figures.set(
        route.name,
        rows.filter((r) => r !== undefined),
      );
    }),
  );
  return figures;
}

async function adaptiveRow(config: Config, stores: Stores, route: Route, region: string) {
  const limit = route.limits.find((l) => l.name === ADAPTIVE_LIMIT);
  const store = stores.offPath(region);
  if (!limit || !store || !route.adaptive) return undefined;
  // the adaptive limit's key is `global`: its one bucket per region needs no client facts
  const identity = identify(limit.key, factsFromParams(new URLSearchParams()), "ip");
  if (identity.kind !== "id") return undefined;
  const hash = await bucketHash(limit, identity.id, region);
  const key = adaptiveStateKey(config.key_prefix, route.name, hash);
  const [state, slots] = await Promise.all([
    orElse(store.hash.getAll(key), {} as Record<string, string>, "adaptive_figures_read_failed", { route: route.name }),
    orElse(
      store.keys.get(bucketKey(config.key_prefix, route.name, limit.name, hash)),
      undefined,
      "adaptive_figures_read_failed",
      { route: route.name },
    ),
  ]);
  if (state.limit === undefined) return undefined;
  const whole = Math.floor(Number(state.limit));
  const histogram = new Map<number, number>();
  for (const pair of String(state.h ?? "").split(",")) {
    const [i, n] = pair.split(":").map(Number);
    if (i !== undefined && n !== undefined && Number.isFinite(i) && Number.isFinite(n)) histogram.set(i, n);
  }
  return {
    region,
    limit: Number(state.probe) > 0 ? Math.max(route.adaptive.min, Math.floor(whole / 2)) : whole,
    in_flight: slots === undefined ? null : liveSlots(slots, Date.now()),
    latency_ms: quantile(histogram, QUANTILES[route.adaptive.latency]),
    base_ms: round(Number(state.base ?? 0), 2),
  };
}

/**
 * The labels and deny entries of the top refused identifiers, from the latest minute each was
 * refused in (`{route}|{id}` and `entry:{route}|{id}` of that minute's labels hash), in one pipeline.
 * Rows without one (labels off, or refused before labels were kept) stay as they are.
 */
export async function withLabels(
  config: Config,
  stores: Stores,
  rows: Array<Blocked & { minute: number }>,
): Promise<Blocked[]> {
  const store = stores.offPath();
  const plain = rows.map(({ minute: _, ...row }) => row);
  if (!store || rows.length === 0) return plain;
  const replies = await orElse(
    readLabels(store, config.key_prefix, rows),
    [] as unknown[],
    "dashboard_labels_read_failed",
  );
  return plain.map((row, i) => {
    const [label, entry] = labelPair(replies[i]);
    return { ...row, ...(label ? { label } : {}), ...(entry ? { entry } : {}) };
  });
}

/** HMGET's two values, as a list or (deserialised by the client) an object of the fields. */
function labelPair(reply: unknown): [string | undefined, string | undefined] {
  const values = Array.isArray(reply) ? reply : Object.values((reply ?? {}) as Record<string, unknown>);
  // a client that deserialises replies turns a numeric JWT subject into a number
  const text = (v: unknown) => (typeof v === "string" || typeof v === "number" ? String(v) || undefined : undefined);
  return [text(values[0]), text(values[1])];
}

function round(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
