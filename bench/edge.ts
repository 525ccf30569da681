/**
 * What sections 8-10 share: a private Redis behind its own bridge (so the delay, hang and refuse
 * switches and the counters touch nothing else), the configuration most deployments start from,
 * a client sending at a fixed pace without waiting for answers, the admin peek of a bucket, and
 * the round trip the bridge's delay really adds.
 */
import type { Miniflare } from "miniflare";
import type { SluiceInput } from "../src/config/schema.js";
import { hit, type Hit, type Place } from "./request.js";
import {
  type BenchStack,
  type Cleanup,
  type RedisBridge,
  startRedisBridge,
  TOKEN,
  type WorkerOptions,
} from "./stack.js";
import { percentile, round } from "./stats.js";

/** Every request enters in Frankfurt: region eu, which has no database of its own. */
export const FROM_EU: Place = { continent: "EU", colo: "FRA" };
export const EXPECTED_REGION = "eu";
export const ADMIN_TOKEN = "bench-admin-token-0123456789";
export const EDGE_PREFIX = "bench-edge";

/** The under-limit client's limit: 100/s (burst 100). */
export const UNDER = { route: "under", limit: "per-ip", path: "/under/item", rate: 100, burst: 100 } as const;
/** The over-limit client's limit: 10/s, burst 20. */
export const OVER = { route: "over", limit: "per-ip", path: "/over/item", rate: 10, burst: 20 } as const;

/**
 * The configuration a new user starts from: one database (the home region's), `regions.eu`
 * without one of its own, and the defaults for `timeout_ms`, `max_timeout_ms` and (unless
 * `on_store_error` is given) `on_store_error`.
 */
export function edgeConfig(onStoreError?: "local" | "open" | "closed"): SluiceInput {
  return {
    key_prefix: EDGE_PREFIX,
    home_region: "us",
    regions: { us: { continents: ["NA"] }, eu: { continents: ["EU"] } },
    ...(onStoreError ? { on_store_error: onStoreError } : {}),
    routes: [
      {
        name: UNDER.route,
        match: "/under/*",
        limits: [{ name: UNDER.limit, key: "ip", rate: UNDER.rate, period: "1s" }],
      },
      {
        name: OVER.route,
        match: "/over/*",
        limits: [{ name: OVER.limit, key: "ip", rate: OVER.rate, period: "1s", burst: OVER.burst }],
      },
    ],
  };
}

/** A private Redis + bridge for sections 8-10, and the way to start Workers on it. */
export interface EdgeStack extends RedisBridge {
  /**
   * `n` Worker instances (each its own workerd, i.e. one isolate) with `sluice`, talking to
   * `redisUrl` (the bridge, or a tap in front of it), the admin API on, their log lines swallowed;
   * `bindings` added (e.g. another `ORIGIN_URL`).
   */
  workers(n: number, sluice: SluiceInput, redisUrl?: string, bindings?: Record<string, string>): Promise<Miniflare[]>;
}

export async function startEdgeStack(stack: BenchStack, cleanup: Cleanup): Promise<EdgeStack> {
  const rb = await startRedisBridge(cleanup, "edge");
  const quiet: WorkerOptions = { quiet: true };
  return {
    ...rb,
    workers: (n, sluice, redisUrl = rb.bridge.url, bindings = {}) =>
      Promise.all(
        Array.from({ length: n }, () =>
          stack.worker(
            sluice,
            {
              UPSTASH_REDIS_REST_URL: redisUrl,
              UPSTASH_REDIS_REST_TOKEN: TOKEN,
              SLUICE_ADMIN_TOKEN: ADMIN_TOKEN,
              ...bindings,
            },
            quiet,
          ),
        ),
      ),
  };
}

export const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

/** One answer of a paced run, with when its request left (ms after the run's start). */
export interface PacedHit extends Hit {
  sentMs: number;
  /** Which of the Workers it went to. */
  worker: number;
}

export interface PacedRun {
  hits: PacedHit[];
  /** From the first request sent to the last answer received, ms. */
  elapsedMs: number;
  /** From the first request sent to the last one sent, ms (the schedule says (n − 1) / rate). */
  sendSpanMs: number;
}

/**
 * One client (`ip`) sending `rate` requests per second for `durationMs`, each at its time whether
 * or not the ones before were answered (an open loop, as real clients do), spread over `workers`
 * in turn: the isolates share the load.
 */
export async function paced(
  workers: Miniflare[],
  path: string,
  ip: string,
  rate: number,
  durationMs: number,
  place: Place = FROM_EU,
): Promise<PacedRun> {
  const n = Math.round((rate * durationMs) / 1000);
  const started = performance.now();
  const pending: Array<Promise<PacedHit>> = [];
  let lastSent = started;
  for (let i = 0; i < n; i++) {
    const at = started + (i * 1000) / rate;
    const wait = at - performance.now();
    if (wait > 0) await sleep(wait);
    const sent = performance.now();
    lastSent = sent;
    const w = i % workers.length;
    pending.push(
      hit(workers[w] as Miniflare, `${path}/${i}`, ip, place).then((h) => ({
        ...h,
        sentMs: sent - started,
        worker: w,
      })),
    );
  }
  const hits = await Promise.all(pending);
  return { hits, elapsedMs: performance.now() - started, sendSpanMs: lastSent - started };
}

/** A few requests per Worker and route from clients nobody else uses, so lists, script and round trip are known. */
export async function warm(workers: Miniflare[], paths: string[], ips: { take(): string }, each = 3): Promise<void> {
  for (const mf of workers)
    for (const path of paths) for (let i = 0; i < each; i++) await hit(mf, `${path}/warm`, ips.take(), FROM_EU);
}

/** What an admin peek (`GET /__sluice/buckets/:route/:limit?ip=..&region=eu`) says of a client's bucket. */
export async function peekRemaining(mf: Miniflare, route: string, limit: string, ip: string): Promise<number> {
  const q = new URLSearchParams({ ip, region: EXPECTED_REGION });
  const res = await mf.dispatchFetch(`http://sluice.bench/__sluice/buckets/${route}/${limit}?${q}`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "CF-Connecting-IP": "192.0.2.250" },
  });
  const text = await res.text();
  if (res.status !== 200)
    throw new Error(`admin peek of ${route}/${limit} for ${ip}: ${res.status} ${text.slice(0, 300)}`);
  const body = JSON.parse(text) as { remaining?: unknown };
  if (typeof body.remaining !== "number")
    throw new Error(`admin peek of ${route}/${limit}: no remaining in ${text.slice(0, 300)}`);
  return body.remaining;
}

/**
 * The median wall time of a PING through the bridge (straight from this process, no Worker), ms.
 * The bridge sleeps ⌊delay / 2⌋ before Redis runs the command and the rest after, so the
 * difference to the same at 0 ms is the round trip the delay really adds.
 */
export async function bridgeRoundTrip(url: string, n: number): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    const res = await fetch(url, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: '["PING"]',
    });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`PING through the bridge answered ${res.status}`);
    samples.push(performance.now() - start);
  }
  return round(
    percentile(
      [...samples].sort((a, b) => a - b),
      50,
    ),
  );
}

/** p50/p99 of some answers' latencies, ms; null when there are none. */
export function p50p99(hits: readonly Hit[]): { p50_ms: number | null; p99_ms: number | null } {
  const sorted = hits.map((h) => h.ms).sort((a, b) => a - b);
  if (sorted.length === 0) return { p50_ms: null, p99_ms: null };
  return { p50_ms: round(percentile(sorted, 50)), p99_ms: round(percentile(sorted, 99)) };
}

/** Counts of `status decision`, e.g. `{ "200 allow": 40, "429 reject": 70 }`. */
export function outcomesOf(hits: readonly Hit[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const h of hits) {
    const k = `${h.status} ${h.decision || "(none)"}`;
    out[k] = (out[k] ?? 0) + 1;
  }
  return out;
}
