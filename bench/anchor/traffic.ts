/**
 * The traffic of the "against @upstash/ratelimit" section: both Workers on one private Redis behind
 * one bridge (its delay giving Redis a round trip), each behind a tap of its own that counts its
 * HTTP requests, rounds interleaved. Every round starts fresh isolates (one Miniflare instance, i.e.
 * one workerd isolate, each) and disposes of them after it, so one Worker's deferred work can never
 * land in the other's round: `INFO commandstats` over a round is everything Redis ran for that Worker.
 */
import { Miniflare } from "miniflare";
import { sleep } from "../edge.js";
import { hit, type Hit } from "../request.js";
import { type Cleanup, commandStats, type RedisBridge, statsDelta, TOKEN } from "../stack.js";
import type { IpSource } from "../stats.js";
import { type Tap, type TapCounts, tapDelta } from "../tap.js";
import type { BuiltWorker, Side } from "./build.js";

export type ShapeKey = "sparse" | "hot" | "bursty";

export interface TrafficOptions {
  /** Rounds per Worker, by shape: more, shorter rounds spread the machine's drift over both Workers alike. */
  rounds: Record<ShapeKey, number>;
  /** Added to every Redis round trip by the bridge, ms. */
  delayMs: number;
  /** After a round's last answer, before the counters are read (deferred work lands). */
  settleMs: number;
  sparse: { isolates: number; seconds: number; ips: number };
  hot: { warmup: number; requests: number };
  bursty: { warmup: number; bursts: number; size: number; pauseMs: number };
}

/** What one round of one shape on one Worker did. */
export interface RoundCounts {
  hits: Hit[];
  tap: TapCounts;
  /** Redis commands run in the round (commandstats calls, the bench's own INFO left out). */
  commands: Record<string, number>;
  /** Requests the other Worker's tap saw meanwhile (must be 0). */
  strayRequests: number;
}

export interface AnchorStack extends RedisBridge {
  taps: Record<Side, Tap>;
  cleanup: Cleanup;
}

/** One isolate of a built Worker, Redis at `redisUrl`, its log lines swallowed. */
export async function startIsolate(built: BuiltWorker, redisUrl: string, cleanup: Cleanup): Promise<Miniflare> {
  const mf = new Miniflare({
    modules: true,
    scriptPath: built.bundle,
    modulesRules: [{ type: "Text", include: ["**/*.lua"] }],
    compatibilityDate: "2026-04-01",
    bindings: { UPSTASH_REDIS_REST_URL: redisUrl, UPSTASH_REDIS_REST_TOKEN: TOKEN },
    handleRuntimeStdio: (out: NodeJS.ReadableStream, err: NodeJS.ReadableStream) => (out.resume(), err.resume()),
  });
  let disposed: Promise<void> | undefined;
  const dispose = mf.dispose.bind(mf);
  mf.dispose = () => (disposed ??= dispose());
  cleanup.add(`miniflare ${built.side}`, () => mf.dispose());
  await mf.ready;
  return mf;
}

/** Sparse: each isolate 1 request a second, staggered, from a few client IPs in turn. */
async function sparse(mfs: Miniflare[], ips: string[], seconds: number): Promise<Hit[]> {
  const start = performance.now();
  const each = (mf: Miniflare, k: number) => async () => {
    const hits: Hit[] = [];
    for (let i = 0; i < seconds; i++) {
      const wait = start + (k * 1000) / mfs.length + i * 1000 - performance.now();
      if (wait > 0) await sleep(wait);
      hits.push(await hit(mf, `/sparse/${i}`, ips[(k + i) % ips.length] as string));
    }
    return hits;
  };
  return (await Promise.all(mfs.map((mf, k) => each(mf, k)()))).flat();
}

/** Hot: one client, one request after another. */
async function hot(mf: Miniflare, ip: string, requests: number): Promise<Hit[]> {
  const hits: Hit[] = [];
  for (let i = 0; i < requests; i++) hits.push(await hit(mf, `/hot/${i}`, ip));
  return hits;
}

/** Bursty: one client, `size` requests at once, a pause, again. */
async function bursty(mf: Miniflare, ip: string, o: TrafficOptions["bursty"]): Promise<Hit[]> {
  const hits: Hit[] = [];
  for (let b = 0; b < o.bursts; b++) {
    if (b > 0) await sleep(o.pauseMs);
    hits.push(...(await Promise.all(Array.from({ length: o.size }, (_, i) => hit(mf, `/burst/${b}/${i}`, ip)))));
  }
  return hits;
}

/** The isolates a shape needs, warmed (uncounted) where the shape says so, and how to drive them. */
async function prepare(
  stack: AnchorStack,
  built: BuiltWorker,
  shape: ShapeKey,
  o: TrafficOptions,
  ips: IpSource,
): Promise<{ mfs: Miniflare[]; drive: () => Promise<Hit[]> }> {
  const url = stack.taps[built.side].url;
  const n = shape === "sparse" ? o.sparse.isolates : 1;
  const mfs = await Promise.all(Array.from({ length: n }, () => startIsolate(built, url, stack.cleanup)));
  const mf = mfs[0] as Miniflare;
  if (shape === "sparse") {
    const pool = Array.from({ length: o.sparse.ips }, () => ips.take());
    return { mfs, drive: () => sparse(mfs, pool, o.sparse.seconds) };
  }
  const warmup = shape === "hot" ? o.hot.warmup : o.bursty.warmup;
  const warmIp = ips.take();
  for (let i = 0; i < warmup; i++) await hit(mf, `/warm/${i}`, warmIp);
  const ip = ips.take();
  return { mfs, drive: () => (shape === "hot" ? hot(mf, ip, o.hot.requests) : bursty(mf, ip, o.bursty)) };
}

/** One round: fresh isolates, counters read around the traffic and the settle time, isolates gone after. */
export async function runRound(
  stack: AnchorStack,
  built: BuiltWorker,
  shape: ShapeKey,
  o: TrafficOptions,
  ips: IpSource,
): Promise<RoundCounts> {
  const other = stack.taps[built.side === "anchor" ? "sluice" : "anchor"];
  const { mfs, drive } = await prepare(stack, built, shape, o, ips);
  try {
    const tapBefore = stack.taps[built.side].counts();
    const otherBefore = other.counts();
    const statsBefore = await commandStats(stack.resp);
    const hits = await drive();
    await sleep(o.settleMs);
    const statsAfter = await commandStats(stack.resp);
    const commands: Record<string, number> = {};
    for (const [name, d] of Object.entries(statsDelta(statsBefore, statsAfter)))
      if (name !== "info" && d.calls !== 0) commands[name] = d.calls;
    const otherAfter = other.counts();
    return {
      hits,
      tap: tapDelta(tapBefore, stack.taps[built.side].counts()),
      commands,
      strayRequests: otherAfter.decision + otherAfter.other - otherBefore.decision - otherBefore.other,
    };
  } finally {
    await Promise.all(mfs.map((mf) => mf.dispose()));
  }
}
