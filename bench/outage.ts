/**
 * Section 9, outage: the same setup as section 8 (one database, `regions.eu` without its own,
 * default budget, two isolates sharing the load, requests from Frankfurt), Redis next door, then
 * hung (the bridge takes each request and never answers) and refusing (the bridge drops each
 * connection at once). A client at 80 requests/s on the 10/s burst 20 limit, under each
 * `on_store_error`: local (the default), open, closed. Then the bridge goes back to normal and
 * each isolate is asked, every 10 ms, until it answers from Redis again.
 */
import type { Miniflare } from "miniflare";
import type { BridgeMode } from "@sluice/dev";
import { type EdgeStack, edgeConfig, FROM_EU, outcomesOf, OVER, p50p99, paced, sleep, UNDER, warm } from "./edge.js";
import { hit, type Place } from "./request.js";
import { disposeWorker } from "./stack.js";
import { type IpSource, round } from "./stats.js";

export interface OutageOptions {
  rate: number;
  durationMs: number;
  /** Give up waiting for an isolate to answer from Redis again after this long. */
  recoveryLimitMs: number;
  /** The `on_store_error` policies to run, in order (`--quick`: local only). */
  policies: Policy[];
}

export type Policy = "local" | "open" | "closed";
const MODES: Array<Exclude<BridgeMode, "normal">> = ["hang", "refuse"];

export interface OutageRun {
  mode: Exclude<BridgeMode, "normal">;
  policy: Policy;
  requests: number;
  /** 200s: forwarded to the origin. */
  admitted: number;
  degraded: number;
  rejected_429: number;
  server_errors: number;
  outcomes: Record<string, number>;
  /** Latency of every answer, and of the admitted ones, ms. */
  p50_ms: number | null;
  p99_ms: number | null;
  admitted_p50_ms: number | null;
  /** local only: isolates × (burst + rate × T), T from the first request sent to the last answer. */
  bound: number | null;
  elapsed_ms: number;
  /** What reached the bridge during the run: HTTP requests, and of those left hanging or refused. */
  bridge_requests: number;
  bridge_hung: number;
  bridge_refused: number;
  /** Per isolate: ms from the bridge back to normal until its first answer decided by Redis (null: not within the limit). */
  recovery_ms: Array<number | null>;
  /** Requests each isolate needed until then (the probes of this loop, not the circuit's). */
  recovery_requests: number[];
}

export interface OutageResult {
  options: OutageOptions;
  from: Place;
  isolates: number;
  limit: { rate: number; burst: number; period_s: number };
  runs: OutageRun[];
  problems: string[];
}

const ISOLATES = 2;

export async function measureOutage(edge: EdgeStack, ips: IpSource, opts: OutageOptions): Promise<OutageResult> {
  const runs: OutageRun[] = [];
  // every policy's isolates at once (startup is the slow part), each pair warmed just before its runs;
  // local is the default: its configuration does not name it
  const started = await Promise.allSettled(
    opts.policies.map((p) => edge.workers(ISOLATES, edgeConfig(p === "local" ? undefined : p))),
  );
  const all = started.flatMap((r) => (r.status === "fulfilled" ? r.value : []));
  const failed = started.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed) {
    await Promise.all(all.map(disposeWorker));
    throw failed.reason;
  }
  for (const [pi, policy] of opts.policies.entries()) {
    const workers = (started[pi] as PromiseFulfilledResult<Miniflare[]>).value;
    try {
      await warm(workers, [UNDER.path, OVER.path], ips);
      await sleep(100);
      for (const mode of MODES) {
        runs.push(await outageRun(edge, workers, ips, opts, { mode, policy }));
        await sleep(100);
      }
    } finally {
      edge.bridge.setMode("normal");
      await Promise.all(workers.map(disposeWorker));
    }
  }
  return {
    options: opts,
    from: FROM_EU,
    isolates: ISOLATES,
    limit: { rate: OVER.rate, burst: OVER.burst, period_s: 1 },
    runs,
    problems: problemsOf(runs),
  };
}

/** One fault under one policy: the over-limit client paced through it, then each isolate's way back. */
async function outageRun(
  edge: EdgeStack,
  workers: Miniflare[],
  ips: IpSource,
  opts: OutageOptions,
  { mode, policy }: Pick<OutageRun, "mode" | "policy">,
): Promise<OutageRun> {
  const ip = ips.take();
  const before = edge.bridge.counts();
  edge.bridge.setMode(mode);
  let run;
  try {
    run = await paced(workers, OVER.path, ip, opts.rate, opts.durationMs);
  } finally {
    edge.bridge.setMode("normal");
  }
  const back = performance.now();
  const after = edge.bridge.counts();
  const recovered = await Promise.all(workers.map((w) => recovery(w, ips, back, opts.recoveryLimitMs)));
  const answers = run.hits;
  const admitted = answers.filter((h) => h.status === 200);
  const elapsedS = run.elapsedMs / 1000;
  return {
    mode,
    policy,
    requests: answers.length,
    admitted: admitted.length,
    degraded: answers.filter((h) => h.decision === "degraded").length,
    rejected_429: answers.filter((h) => h.status === 429).length,
    server_errors: answers.filter((h) => h.status >= 500).length,
    outcomes: outcomesOf(answers),
    ...p50p99(answers),
    admitted_p50_ms: p50p99(admitted).p50_ms,
    bound: policy === "local" ? ISOLATES * Math.floor(OVER.burst + OVER.rate * elapsedS) : null,
    elapsed_ms: round(run.elapsedMs, 1),
    bridge_requests: after.requests - before.requests,
    bridge_hung: after.hung - before.hung,
    bridge_refused: after.refused - before.refused,
    recovery_ms: recovered.map((r) => r.ms),
    recovery_requests: recovered.map((r) => r.requests),
  };
}

/** Asks `mf` every 10 ms (fresh clients, the 100/s route) until an answer is decided by Redis: 200 allow or 429. */
async function recovery(
  mf: Miniflare,
  ips: IpSource,
  since: number,
  limitMs: number,
): Promise<{ ms: number | null; requests: number }> {
  let requests = 0;
  while (performance.now() - since < limitMs) {
    requests++;
    const h = await hit(mf, `${UNDER.path}/back`, ips.take(), FROM_EU);
    if ((h.status === 200 && h.decision === "allow") || h.status === 429)
      return { ms: round(performance.now() - since, 1), requests };
    await sleep(10);
  }
  return { ms: null, requests };
}

function problemsOf(runs: OutageRun[]): string[] {
  const problems: string[] = [];
  for (const r of runs) {
    const at = `outage, Redis ${r.mode === "hang" ? "hung" : "refusing"}, on_store_error ${r.policy}`;
    if (r.policy === "local" && r.bound !== null && r.admitted > r.bound)
      problems.push(
        `OVER-ADMISSION: ${at}: admitted ${r.admitted}, above the local bound ${r.bound} (${ISOLATES} isolates × (burst + rate × T))`,
      );
    if (r.policy !== "closed" && r.server_errors > 0)
      problems.push(`${at}: ${r.server_errors} answers 5xx ${JSON.stringify(r.outcomes)}`);
    if (r.policy === "closed" && r.admitted > 0)
      problems.push(`${at}: ${r.admitted} requests admitted while failing closed`);
    if (r.policy === "open" && r.admitted !== r.requests)
      problems.push(
        `${at}: ${r.requests - r.admitted} requests not admitted while failing open ${JSON.stringify(r.outcomes)}`,
      );
    const unexpected = Object.keys(r.outcomes).filter((k) => !["200 degraded", "429 reject", "503 reject"].includes(k));
    if (unexpected.length > 0) problems.push(`${at}: unexpected answers ${JSON.stringify(r.outcomes)}`);
    r.recovery_ms.forEach((ms, i) => {
      if (ms === null)
        problems.push(
          `${at}: isolate ${i + 1} did not answer from Redis again within the limit after the bridge went back to normal`,
        );
      else if (ms > 1000)
        problems.push(`${at}: isolate ${i + 1} took ${ms} ms to answer from Redis again (target: within 1 s)`);
    });
  }
  return problems;
}
