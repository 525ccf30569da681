/**
 * Section 11, origin protection: the gateway in front of an origin that queues
 * (`dev/queueing-origin.ts`: 4 servers, 100 ms a request, 503s past 16 in flight: 40 requests/s at
 * best), under an open-loop load of twice that, 80/s. Cases: no limit (the origin collapses), a
 * fixed in-flight cap (`algorithm = "concurrency"`, key `global`) of each size, and the adaptive
 * limit (a route's `adaptive` setting; recorded as not available while the configuration rejects
 * it). Per case: goodput, latency of the 200s, shares refused (429) and failed (5xx), and the most
 * requests the origin had in flight.
 */
import type { Miniflare } from "miniflare";
import { type QueueingModel, type QueueingOrigin, startQueueingOrigin } from "@sluice/dev";
import {
  ADAPTIVE_CASES,
  type AdaptiveInput,
  adaptiveRoute,
  PROTECT_PATH,
  protectConfig,
  protectRoute,
} from "./config.js";
import { type EdgeStack, outcomesOf, type PacedHit, paced, warm } from "./edge.js";
import { type Cleanup, disposeWorker } from "./stack.js";
import { type IpSource, percentile, round } from "./stats.js";

export const PROTECT_MODEL: QueueingModel = { servers: 4, serviceMs: 100, knee: 16 };

export interface ProtectOptions {
  /** Fixed in-flight caps measured, one case each. */
  limits: number[];
  /** Requests per second, open loop (twice the origin's capacity). */
  rate: number;
  /** Sent at the same rate before the measurement, not counted. */
  warmupMs: number;
  /** The adaptive cases' warm-up instead: the limit learns from a cold start under the load. */
  learnMs: number;
  durationMs: number;
}

export interface ProtectCase {
  key: string;
  label: string;
  /** false: the configuration rejected the case's settings (the feature is not in this build). */
  available: boolean;
  /** Why not, when not available (the configuration's message). */
  reason?: string;
  sent?: number;
  ok?: number;
  /** 200s per second of the measured window. */
  goodput_per_s?: number;
  p50_ok_ms?: number | null;
  p99_ok_ms?: number | null;
  share_429?: number;
  share_5xx?: number;
  /** Anything neither 200, 429 nor 5xx. */
  share_other?: number;
  outcomes?: Record<string, number>;
  origin_max_in_flight?: number;
  origin_ok?: number;
  origin_failed?: number;
}

export interface ProtectResult {
  model: QueueingModel;
  capacity_per_s: number;
  options: ProtectOptions;
  cases: ProtectCase[];
  problems: string[];
}

export async function measureProtect(
  edge: EdgeStack,
  cleanup: Cleanup,
  ips: IpSource,
  options: ProtectOptions,
): Promise<ProtectResult> {
  const origin = await startQueueingOrigin(PROTECT_MODEL);
  cleanup.add("queueing origin", () => origin.close());
  const cases: ProtectCase[] = [];
  try {
    const fixed: Array<number | null> = [null, ...options.limits];
    const routes = fixed.map(protectRoute);
    const [mf] = (await edge.workers(1, protectConfig(routes), undefined, { ORIGIN_URL: origin.url })) as [Miniflare];
    try {
      await warm(
        [mf],
        routes.map((r) => `${PROTECT_PATH}/${r.name}`),
        ips,
      );
      for (const [i, limit] of fixed.entries()) {
        const name = routes[i]?.name ?? "";
        const label = limit === null ? "no limit" : `fixed in-flight cap ${limit}`;
        cases.push(await runCase(mf, origin, ips, { key: name, label, path: `${PROTECT_PATH}/${name}` }, options));
      }
    } finally {
      await disposeWorker(mf);
    }
    for (const c of ADAPTIVE_CASES) cases.push(await adaptiveCase(edge, origin, ips, c, options));
  } finally {
    await origin.close();
  }
  const capacity = (PROTECT_MODEL.servers * 1000) / PROTECT_MODEL.serviceMs;
  return { model: PROTECT_MODEL, capacity_per_s: capacity, options, cases, problems: protectProblems(cases) };
}

/** One adaptive case in a Worker of its own, or "not available" when the configuration rejects `adaptive`. */
async function adaptiveCase(
  edge: EdgeStack,
  origin: QueueingOrigin,
  ips: IpSource,
  c: { key: string; label: string; adaptive: AdaptiveInput },
  options: ProtectOptions,
): Promise<ProtectCase> {
  let mf: Miniflare;
  try {
    const config = protectConfig([adaptiveRoute(c.key, c.adaptive)]);
    [mf] = (await edge.workers(1, config, undefined, { ORIGIN_URL: origin.url })) as [Miniflare];
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    if (!/adaptive/i.test(message)) throw error;
    return { key: c.key, label: c.label, available: false, reason: message.slice(0, 300) };
  }
  try {
    const path = `${PROTECT_PATH}/${c.key}`;
    await warm([mf], [path], ips);
    return await runCase(
      mf,
      origin,
      ips,
      { key: c.key, label: c.label, path },
      { ...options, warmupMs: options.learnMs },
    );
  } finally {
    await disposeWorker(mf);
  }
}

/** The open-loop load through one route: warm-up, then the measured window, the origin's stats zeroed between. */
async function runCase(
  mf: Miniflare,
  origin: QueueingOrigin,
  ips: IpSource,
  what: { key: string; label: string; path: string },
  o: ProtectOptions,
): Promise<ProtectCase> {
  origin.reset();
  const zero = setTimeout(() => origin.reset(), o.warmupMs);
  const run = await paced([mf], what.path, ips.take(), o.rate, o.warmupMs + o.durationMs);
  clearTimeout(zero);
  const stats = origin.stats();
  const hits = run.hits.filter((h) => h.sentMs >= o.warmupMs);
  const ok = hits.filter((h) => h.status === 200);
  const sorted = ok.map((h) => h.ms).sort((a, b) => a - b);
  const share = (pick: (h: PacedHit) => boolean) => round(hits.filter(pick).length / Math.max(1, hits.length), 3);
  return {
    key: what.key,
    label: what.label,
    available: true,
    sent: hits.length,
    ok: ok.length,
    goodput_per_s: round(ok.length / (o.durationMs / 1000), 1),
    p50_ok_ms: sorted.length ? round(percentile(sorted, 50), 1) : null,
    p99_ok_ms: sorted.length ? round(percentile(sorted, 99), 1) : null,
    share_429: share((h) => h.status === 429),
    share_5xx: share((h) => h.status >= 500),
    share_other: share((h) => h.status !== 200 && h.status !== 429 && h.status < 500),
    outcomes: outcomesOf(hits),
    origin_max_in_flight: stats.maxInFlight,
    origin_ok: stats.ok,
    origin_failed: stats.failed,
  };
}

function protectProblems(cases: ProtectCase[]): string[] {
  const problems: string[] = [];
  for (const c of cases) {
    if (!c.available) continue;
    const cap = /^fixed-(\d+)$/.exec(c.key)?.[1];
    if (cap !== undefined && (c.origin_max_in_flight ?? 0) > Number(cap))
      problems.push(`origin protection, ${c.label}: ${c.origin_max_in_flight} in flight at the origin (cap ${cap})`);
    if ((c.share_other ?? 0) > 0)
      problems.push(`origin protection, ${c.label}: answers other than 200/429/5xx ${JSON.stringify(c.outcomes)}`);
    if (c.outcomes && Object.keys(c.outcomes).some((k) => k.endsWith(" degraded")))
      problems.push(`origin protection, ${c.label}: degraded decisions ${JSON.stringify(c.outcomes)}`);
  }
  return problems;
}
