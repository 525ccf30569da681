/**
 * Section 8, distance: the setup most deployments start from (one database, the home region's;
 * `regions.eu` without one of its own; default `timeout_ms`, `max_timeout_ms`, `on_store_error`),
 * requests entering in Frankfurt, two isolates (two Worker instances) sharing the load, and the
 * Redis placed 0, 20 and 80 ms away by the bridge's delay switch. Two clients at once, each for a
 * few seconds at 40 requests/s: one under its limit (100/s), one over it (10/s, burst 20).
 *
 * The Workers reach the bridge through a tap (`tap.ts`) that counts the HTTP requests carrying a
 * script call per route, so each client's Redis requests per decision are known although both
 * share the isolates. Decisions that needed no request (local decisions from token leases, when
 * the build has them) show up as fewer requests than decisions; nothing here reads lease internals.
 * The admin peek of a bucket goes through a third Worker straight to the bridge, outside the count.
 */
import type { Miniflare } from "miniflare";
import {
  type EdgeStack,
  bridgeRoundTrip,
  EDGE_PREFIX,
  edgeConfig,
  FROM_EU,
  outcomesOf,
  OVER,
  p50p99,
  paced,
  type PacedRun,
  peekRemaining,
  sleep,
  UNDER,
  warm,
} from "./edge.js";
import type { Place } from "./request.js";
import { type BenchStack, type Cleanup, disposeWorker } from "./stack.js";
import { type IpSource, round } from "./stats.js";
import { startTap, type Tap, type TapCounts, tapDelta } from "./tap.js";

export interface DistanceOptions {
  /** Delays set on the bridge (`setLatency`), ms: the round trip each adds, split half before Redis, half after. */
  latencies: number[];
  /** Requests per second of each client. */
  rate: number;
  durationMs: number;
  /** How long after the run the under-limit client's bucket is read again (a lease ends, and is given back, at most 1.25 s after its grant). */
  settleMs: number;
}

export interface DistanceClient {
  key: "under" | "over";
  label: string;
  path: string;
  limit: { rate: number; burst: number; period_s: number };
  rate: number;
  requests: number;
  /** 200s (forwarded to the origin), `allow` or `degraded`. */
  admitted: number;
  /** under: every request; over: burst + rate × duration (the figure). */
  ideal: number;
  /** What Redis alone admits for the actual send times: burst + ⌊rate × (last send − first send)⌋ (over only). */
  schedule_exact: number | null;
  rejected: number;
  degraded: number;
  /** Any answer other than 200 allow/degraded and 429 reject, by `status decision`. */
  unexpected: Record<string, number>;
  outcomes: Record<string, number>;
  /** Latency of the admitted requests, ms. */
  p50_ms: number | null;
  p99_ms: number | null;
  /** HTTP requests carrying a script call for this client's route (decisions, lease renewals and give-backs alike). */
  redis_requests: number;
  redis_requests_per_decision: number;
  /** Decisions that cannot have had a request of their own: non-degraded answers − script requests, at least 0. */
  decided_without_request: number;
  origin_received: number;
  /** over: ideal − admitted (negative: over-admission). */
  under_admission: number | null;
  /** under: the bucket in Redis by the admin peek, right after the client stopped and `settle_ms` later. */
  bucket: null | {
    burst: number;
    should_be_at_least: number;
    right_after: number;
    missing_right_after: number;
    settle_ms: number;
    after_settle: number;
    missing_after_settle: number;
  };
  elapsed_ms: number;
  send_span_ms: number;
}

export interface DistanceStep {
  injected_ms: number;
  /** Median PING through the bridge from this process, ms, and its difference to the same at +0 ms. */
  bridge_rtt_ms: number;
  effective_added_rtt_ms: number;
  clients: DistanceClient[];
  /** The Workers' other HTTP requests during the run (metrics flush, lists and overrides refresh). */
  background_requests: number;
  background_commands: Record<string, number>;
}

export interface DistanceResult {
  options: DistanceOptions;
  from: Place;
  isolates: number;
  /** True when some decision of the under-limit client was made without a Redis request. */
  leases_detected: boolean;
  steps: DistanceStep[];
  problems: string[];
}

const ISOLATES = 2;

export async function measureDistance(
  stack: BenchStack,
  edge: EdgeStack,
  cleanup: Cleanup,
  ips: IpSource,
  opts: DistanceOptions,
): Promise<DistanceResult> {
  const tap = await startTap(edge.bridge.url, cleanup, "distance");
  const [admin] = (await edge.workers(1, edgeConfig(), edge.bridge.url)) as [Miniflare];
  const ctx: DistanceContext = { stack, edge, tap, admin, ips, opts };
  const steps: DistanceStep[] = [];
  try {
    const base = await bridgeRoundTrip(edge.bridge.url, 10);
    for (const injected of opts.latencies) steps.push(await distanceStep(ctx, injected, base));
  } finally {
    edge.bridge.setLatency(0);
    await disposeWorker(admin);
    await tap.close();
  }
  const leases = steps.some((s) => s.clients.some((c) => c.key === "under" && c.decided_without_request > 0));
  return {
    options: opts,
    from: FROM_EU,
    isolates: ISOLATES,
    leases_detected: leases,
    steps,
    problems: problemsOf(steps),
  };
}

/** One delay: the bridge placed away, fresh isolates warmed, both clients run, the step's figures. */
async function distanceStep(ctx: DistanceContext, injected: number, base: number): Promise<DistanceStep> {
  const { edge, tap, ips, opts } = ctx;
  edge.bridge.setLatency(injected);
  const rtt = injected === 0 ? base : await bridgeRoundTrip(edge.bridge.url, 10);
  const workers = await edge.workers(ISOLATES, edgeConfig(), tap.url);
  try {
    await warm(workers, [UNDER.path, OVER.path], ips);
    await sleep(100);
    const run = await runClients(ctx, workers);
    const stray = Object.keys(run.counted.decisionByRoute).filter((r) => r !== UNDER.route && r !== OVER.route);
    if (stray.length > 0)
      throw new Error(
        `distance: script requests for routes ${stray.join(", ")} (expected only ${UNDER.route} and ${OVER.route} under ${EDGE_PREFIX})`,
      );
    return {
      injected_ms: injected,
      bridge_rtt_ms: rtt,
      effective_added_rtt_ms: round(rtt - base),
      clients: [underClient(opts, run), overClient(opts, run)],
      background_requests: run.counted.other,
      background_commands: run.counted.otherCommands,
    };
  } finally {
    await Promise.all(workers.map(disposeWorker));
  }
}

interface DistanceContext {
  stack: BenchStack;
  edge: EdgeStack;
  tap: Tap;
  /** A Worker straight on the bridge, for the admin peek of the under-limit client's bucket. */
  admin: Miniflare;
  ips: IpSource;
  opts: DistanceOptions;
}

/** What one delay's run of both clients gave: their answers, the tap's counts, the origin's, the bucket peeks. */
interface ClientsRun {
  under: PacedRun;
  over: PacedRun;
  counted: TapCounts;
  received: { under: number; over: number };
  rightAfter: number;
  afterSettle: number;
}

/** Both clients at once, paced through the isolates; then the under-limit bucket right after and settled. */
async function runClients(
  { stack, tap, admin, ips, opts }: DistanceContext,
  workers: Miniflare[],
): Promise<ClientsRun> {
  const before = tap.counts();
  const originBefore = stack.origin.seen.length;
  const underIp = ips.take();
  const overIp = ips.take();
  const [under, over] = await Promise.all([
    paced(workers, UNDER.path, underIp, opts.rate, opts.durationMs),
    paced(workers, OVER.path, overIp, opts.rate, opts.durationMs),
  ]);
  const stopped = performance.now();
  const rightAfter = await peekRemaining(admin, UNDER.route, UNDER.limit, underIp);
  await sleep(Math.max(0, 200 - (performance.now() - stopped))); // renewals started in waitUntil reach the tap
  const counted = tapDelta(before, tap.counts());
  await sleep(Math.max(0, opts.settleMs - (performance.now() - stopped)));
  const afterSettle = await peekRemaining(admin, UNDER.route, UNDER.limit, underIp);
  const seen = stack.origin.seen.slice(originBefore);
  const received = (path: string) =>
    seen.filter((s) => s.path.startsWith(`${path}/`) && !s.path.endsWith("/warm")).length;
  return {
    under,
    over,
    counted,
    received: { under: received(UNDER.path), over: received(OVER.path) },
    rightAfter,
    afterSettle,
  };
}

function underClient(opts: DistanceOptions, run: ClientsRun): DistanceClient {
  return client(
    "under",
    `${opts.rate}/s under ${UNDER.rate}/s`,
    UNDER,
    run.under,
    opts.rate,
    run.under.hits.length,
    null,
    run.counted.decisionByRoute[UNDER.route] ?? 0,
    run.received.under,
    {
      burst: UNDER.burst,
      should_be_at_least: UNDER.burst - 1,
      right_after: run.rightAfter,
      missing_right_after: Math.max(0, UNDER.burst - 1 - run.rightAfter),
      settle_ms: opts.settleMs,
      after_settle: run.afterSettle,
      missing_after_settle: Math.max(0, UNDER.burst - run.afterSettle),
    },
  );
}

function overClient(opts: DistanceOptions, run: ClientsRun): DistanceClient {
  return client(
    "over",
    `${opts.rate}/s over ${OVER.rate}/s burst ${OVER.burst}`,
    OVER,
    run.over,
    opts.rate,
    OVER.burst + OVER.rate * (opts.durationMs / 1000),
    OVER.burst + Math.floor((OVER.rate * run.over.sendSpanMs) / 1000),
    run.counted.decisionByRoute[OVER.route] ?? 0,
    run.received.over,
    null,
  );
}

function client(
  key: "under" | "over",
  label: string,
  limit: { path: string; rate: number; burst: number },
  run: PacedRun,
  rate: number,
  ideal: number,
  scheduleExact: number | null,
  redisRequests: number,
  originReceived: number,
  bucket: DistanceClient["bucket"],
): DistanceClient {
  const admittedHits = run.hits.filter((h) => h.status === 200);
  const degraded = run.hits.filter((h) => h.decision === "degraded").length;
  const unexpected: Record<string, number> = {};
  for (const [k, n] of Object.entries(outcomesOf(run.hits)))
    if (k !== "200 allow" && k !== "200 degraded" && k !== "429 reject") unexpected[k] = n;
  const decisions = run.hits.length;
  const nonDegraded = decisions - degraded;
  return {
    key,
    label,
    path: limit.path,
    limit: { rate: limit.rate, burst: limit.burst, period_s: 1 },
    rate,
    requests: decisions,
    admitted: admittedHits.length,
    ideal,
    schedule_exact: scheduleExact,
    rejected: run.hits.filter((h) => h.status === 429).length,
    degraded,
    unexpected,
    outcomes: outcomesOf(run.hits),
    ...p50p99(admittedHits),
    redis_requests: redisRequests,
    redis_requests_per_decision: round(redisRequests / decisions),
    decided_without_request: Math.max(0, nonDegraded - redisRequests),
    origin_received: originReceived,
    under_admission: key === "over" ? ideal - admittedHits.length : null,
    bucket,
    elapsed_ms: round(run.elapsedMs, 1),
    send_span_ms: round(run.sendSpanMs, 1),
  };
}

function problemsOf(steps: DistanceStep[]): string[] {
  const problems: string[] = [];
  for (const s of steps) {
    for (const c of s.clients) {
      const at = `distance +${s.injected_ms} ms, ${c.label}`;
      if (c.admitted > c.ideal) {
        problems.push(
          `OVER-ADMISSION: ${at}: admitted ${c.admitted}, more than the ideal ${c.ideal} (Redis alone, for these send times: ${c.schedule_exact ?? c.ideal}; ${c.degraded} of the answers degraded)`,
        );
      }
      if (Object.keys(c.unexpected).length > 0)
        problems.push(`${at}: unexpected answers ${JSON.stringify(c.unexpected)}`);
      if (c.degraded > 0)
        problems.push(
          `${at}: ${c.degraded} of ${c.requests} decisions degraded with Redis healthy (the budget did not cover the round trip)`,
        );
      if (c.origin_received !== c.admitted)
        problems.push(`${at}: the origin received ${c.origin_received} requests for ${c.admitted} admitted`);
      if (c.key === "under" && c.rejected > 0)
        problems.push(`${at}: ${c.rejected} requests refused although the client stays under its limit`);
      if (c.bucket && c.bucket.missing_after_settle > 0) {
        problems.push(
          `${at}: the bucket holds ${c.bucket.after_settle} of ${c.bucket.burst} ${c.bucket.settle_ms} ms after the client stopped: tokens not given back`,
        );
      }
    }
  }
  return problems;
}
