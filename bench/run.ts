/**
 * `npm run bench`: sluice's benchmarks against a private local stack, in one run.
 *
 *   1. Redis requests per decision (bridge HTTP requests, INFO commandstats)
 *   2. latency of an allowed request, limiting on vs off (sequential and 8 concurrent clients)
 *   3. EVALSHA of lua/decide.lua vs INCR with redis-benchmark
 *   4. a `split` limit across four regions: static equal split vs sluice's split (simulated)
 *   5. latency of a `global` limit vs a `region` one when the home Redis is far (two Redis stacks)
 *   6. Redis memory per bucket, per algorithm (MEMORY USAGE)
 *   7. the boundary effect, measured: decide.lua on a simulated clock, most admitted in any second
 *   8. distance: Redis 0, 20, 80 ms away, two isolates, a client under and one over its limit
 *   9. outage: Redis hung, then refusing, under on_store_error local / open / closed; recovery
 *  10. billed commands per decision (commandstats: EVALSHA + the commands inside the script), and what
 *      each #14 feature costs in Redis, on the request path and in the background
 *  11. origin protection: no limit, fixed in-flight caps and the adaptive limit in front of a
 *      queueing origin under twice its capacity
 *  12. against @upstash/ratelimit: the same Worker written with each, sizes, evaluation time, Redis
 *      requests and billed commands per decision, p50/p99, on sparse, hot and bursty traffic
 *  13. the SMS case: a burst offered at once to a `queue` route limited globally across two regions,
 *      delivered by the Queues consumer, against the same burst sent straight to the provider
 *
 * Prints a table and writes bench/results/runs/bench-<ISO date>.json and bench/results/latest.json, and the
 * charts of bench/charts.ts as bench/results/charts/<name>.svg (`npm run bench:charts` redraws them from a JSON).
 * `--quick` runs every part with small counts (a smoke test; its figures are noisy). `--only anchor`
 * runs section 12 alone (writes runs/bench-anchor-<ISO date>.json, not latest.json), `--only sms` section 13.
 * A full run (and `--only anchor` without `--quick`) regenerates the marked table in README.md and docs/benchmarks.md,
 * a full run (and `--only sms` without `--quick`) section 13's in docs/benchmarks.md.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { replyToJs } from "@sluice/dev";
import type { AnchorResult } from "./anchor/figures.js";
import { type AnchorOptions, measureAnchor } from "./anchor/index.js";
import { ANCHOR_FULL, ANCHOR_QUICK, publishAnchor, renderAnchorSection } from "./anchor/section.js";
import { type BilledResult, measureBilled } from "./billed.js";
import { type BoundaryResult, measureBoundary } from "./boundary.js";
import { writeCharts } from "./chart-files.js";
import { chartsFromResults } from "./charts.js";
import { LIMITED, PATH_FOUR, PATH_ONE, PATH_UNLIMITED, UNLIMITED } from "./config.js";
import { type DecisionCounts, type DecisionResult, measureDecisions } from "./decision.js";
import { type DistanceOptions, type DistanceResult, measureDistance } from "./distance.js";
import { startEdgeStack } from "./edge.js";
import { measureOutage, type OutageOptions, type OutageResult } from "./outage.js";
import { measureProtect, type ProtectOptions, type ProtectResult } from "./protect.js";
import { renderFeatures, renderProtect } from "./render-features.js";
import { type LatencyOptions, type LatencyResult, measureLatency } from "./latency.js";
import { measureRegions, type RegionsOptions, type RegionsResult } from "./regions.js";
import { importDecide } from "./lua-text.js";
import { measureMemory, type MemoryResult } from "./memory.js";
import { decideLuaForRedis, measureScripts, type BenchmarkOptions, type ScriptResult } from "./scripts.js";
import { measureSplit, type SplitResult } from "./split.js";
import { renderSmsSection, type SmsOptions, type SmsResult } from "./sms/figures.js";
import { measureSms, publishSms, SMS_FULL, SMS_QUICK } from "./sms/index.js";
import { type BenchStack, BUILD_DIR, buildWorker, Cleanup, startStack } from "./stack.js";
import { IpSource, round } from "./stats.js";
import { fmt, table } from "./table.js";

const RESULTS_DIR = resolve("bench/results");
const CHARTS_DIR = join(RESULTS_DIR, "charts");
const RUNS_DIR = join(RESULTS_DIR, "runs");

interface Sizes {
  decisions: number;
  latency: LatencyOptions;
  redisBenchmark: BenchmarkOptions;
  regions: RegionsOptions;
  /** Section 6: buckets created per algorithm. */
  memoryBuckets: number;
  distance: DistanceOptions;
  outage: OutageOptions;
  /** Section 10: decisions per row. */
  billedDecisions: number;
  protect: ProtectOptions;
  anchor: AnchorOptions;
  sms: SmsOptions;
}

const FULL: Sizes = {
  decisions: 500,
  latency: { warmup: 200, requests: 2000, block: 250, clients: 8, concurrentRequests: 2000, rounds: 2 },
  redisBenchmark: { requests: 100_000, clients: 50, keyspace: 100_000 },
  regions: { latencies: [0, 50], warmup: 50, requests: 300, block: 50 },
  memoryBuckets: 1000,
  distance: { latencies: [0, 20, 80], rate: 40, durationMs: 3000, settleMs: 1500 },
  outage: { rate: 80, durationMs: 3000, recoveryLimitMs: 5000, policies: ["local", "open", "closed"] },
  billedDecisions: 200,
  protect: { limits: [2, 4, 8, 16, 24], rate: 80, warmupMs: 1000, learnMs: 15_000, durationMs: 6000 },
  anchor: ANCHOR_FULL,
  sms: SMS_FULL,
};

const QUICK: Sizes = {
  decisions: 50,
  latency: { warmup: 20, requests: 200, block: 50, clients: 8, concurrentRequests: 200, rounds: 2 },
  redisBenchmark: { requests: 10_000, clients: 50, keyspace: 100_000 },
  regions: { latencies: [0, 50], warmup: 10, requests: 60, block: 20 },
  memoryBuckets: 100,
  distance: { latencies: [80], rate: 40, durationMs: 1000, settleMs: 1500 },
  outage: { rate: 80, durationMs: 400, recoveryLimitMs: 5000, policies: ["local"] },
  billedDecisions: 20,
  protect: { limits: [4, 16], rate: 80, warmupMs: 500, learnMs: 3000, durationMs: 1500 },
  anchor: ANCHOR_QUICK,
  sms: SMS_QUICK,
};

type Step = (what: string) => void;

async function main(): Promise<number> {
  const values = options();
  const sizes = values.quick ? QUICK : FULL;
  const cleanup = new Cleanup();
  stopOnSignals(cleanup);
  const started = new Date();
  const t0 = performance.now();
  const step: Step = (what) => console.error(`bench: [${((performance.now() - t0) / 1000).toFixed(1)} s] ${what}`);
  try {
    if (values.only === "anchor") return await runAnchorOnly(cleanup, values.quick, started, step);
    if (values.only === "sms") return await runSmsOnly(cleanup, values.quick, started, step);
    const { stack, memory, boundary } = await startAll(cleanup, sizes, step);
    const ips = new IpSource();
    const local = await measureOnStack(stack, cleanup, ips, sizes, step);
    const edge = await measureAtTheEdge(stack, cleanup, ips, sizes, step);
    const problems = [
      ...findProblems(local.decisions, local.latency),
      ...[local.split, local.regions, boundary, ...Object.values(edge)].flatMap((section) => section.problems),
    ];
    const redisVersion = await serverVersion(stack.resp.send(["INFO", "server"]));
    const finished = new Date();
    const result = {
      name: values.quick ? "bench-quick" : "bench",
      started_at: started.toISOString(),
      finished_at: finished.toISOString(),
      duration_s: round((finished.getTime() - started.getTime()) / 1000, 1),
      quick: values.quick,
      environment: environment(redisVersion),
      sizes,
      // the sections in the order the JSON has always had them
      ...local,
      memory,
      boundary,
      ...edge,
      problems,
    };
    step("done; stopping the stack");
    report(result, started);
    if (!values.quick) publishTables(edge, { started, revision: result.environment.git, command: "npm run bench" });
    return 0;
  } finally {
    await cleanup.run();
  }
}

/** A full run's generated tables in the docs: sections 12 and 13. */
function publishTables(
  edge: { anchor: AnchorResult; sms: SmsResult },
  meta: { started: Date; revision: string; command: string },
): void {
  docsWritten([...new Set([...publishAnchor(edge.anchor, meta), ...publishSms(edge.sms, meta)])]);
}

/** `--quick` (small counts), `--only anchor` (section 12 alone) and `--only sms` (section 13 alone). */
function options(): { quick: boolean; only?: string } {
  const { values } = parseArgs({
    options: { quick: { type: "boolean", default: false }, only: { type: "string" } },
  });
  if (values.only !== undefined && values.only !== "anchor" && values.only !== "sms")
    throw new Error(`--only ${values.only}: the sections that run alone are "anchor" and "sms"`);
  return values;
}

/** Ctrl-C or SIGTERM: stop every process the bench started, then exit as the signal says. */
function stopOnSignals(cleanup: Cleanup): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    console.error(`\nbench: ${signal}, stopping everything`);
    void cleanup.run().finally(() => process.exit(signal === "SIGINT" ? 130 : 143));
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
}

/** The Worker's build, the stack, and sections 6 and 7 while wrangler builds. */
async function startAll(cleanup: Cleanup, sizes: Sizes, step: Step) {
  step("building the Worker with wrangler (.wrangler/bench-build) and starting redis-server, bridge, origin");
  // All at once; allSettled so nothing is still starting when cleanup runs after a failure.
  const bundle = buildWorker(cleanup);
  const starting = startStack(cleanup, bundle);
  // Sections 6 and 7 need only Redis: they run while wrangler builds, on a Redis nothing else has
  // touched yet (so used_memory moves only with their own keys), and before section 1 counts.
  const early = starting.then((stack) => measureEarly(stack, cleanup, sizes, step));
  const [built, stackResult, earlyResult] = await Promise.allSettled([bundle, starting, early]);
  if (built.status === "rejected") throw built.reason;
  if (stackResult.status === "rejected") throw stackResult.reason;
  if (earlyResult.status === "rejected") throw earlyResult.reason;
  return { stack: stackResult.value, ...earlyResult.value };
}

/** Sections 1 to 5, on the bench's own stack. */
async function measureOnStack(stack: BenchStack, cleanup: Cleanup, ips: IpSource, sizes: Sizes, step: Step) {
  step(`1/11 Redis requests per decision (${sizes.decisions} allowed requests per route)`);
  const decisions = await measureDecisions(stack, cleanup, ips, sizes.decisions);

  step(
    `2/11 latency, limiting on vs off (${sizes.latency.requests} sequential + ${sizes.latency.concurrentRequests} with ${sizes.latency.clients} clients, per variant)`,
  );
  const on = await stack.worker(LIMITED);
  const off = await stack.worker(UNLIMITED);
  const latency = await measureLatency(
    [
      { key: "off", label: "limiting off (routes: [])", mf: off, path: PATH_UNLIMITED, expect: "allow" },
      { key: "on_1", label: "sluice, 1 limit", mf: on, path: PATH_ONE, expect: "allow" },
      { key: "on_4", label: "sluice, 4 limits", mf: on, path: PATH_FOUR, expect: "allow" },
    ],
    ips,
    sizes.latency,
  );

  step(
    `3/11 EVALSHA vs INCR with redis-benchmark (-n ${sizes.redisBenchmark.requests} -c ${sizes.redisBenchmark.clients})`,
  );
  const scripts = await measureScripts(stack, cleanup, sizes.redisBenchmark);

  step("4/11 split limit across four regions: static equal split vs sluice's split (simulated clock, 60 s)");
  const split = measureSplit();

  const r = sizes.regions;
  step(
    `5/11 global vs region limit from EU with the home Redis far away (+${r.latencies.join(" / +")} ms; ${r.requests} sequential per route and latency)`,
  );
  const regions = await measureRegions(stack, cleanup, ips, sizes.regions);
  return { decisions, latency, scripts, split, regions };
}

/** Sections 8 to 11, on a Redis and bridge of their own (10 first: its commandstats count nothing else), then 12 on its own. */
async function measureAtTheEdge(stack: BenchStack, cleanup: Cleanup, ips: IpSource, sizes: Sizes, step: Step) {
  const edge = await startEdgeStack(stack, cleanup);
  step(
    `10/11 billed commands per decision (${sizes.billedDecisions} per row; INFO commandstats of a Redis of its own)`,
  );
  const billed = await measureBilled(edge, cleanup, ips, sizes.billedDecisions);
  const ds = sizes.distance;
  step(
    `8/11 distance: Redis +${ds.latencies.join(" / +")} ms, 2 isolates, clients at ${ds.rate}/s under and over their limits for ${ds.durationMs / 1000} s`,
  );
  const distance = await measureDistance(stack, edge, cleanup, ips, ds);
  const os = sizes.outage;
  step(
    `9/11 outage: Redis hung, then refusing, ${os.rate}/s for ${os.durationMs / 1000} s under on_store_error ${os.policies.join(" / ")}`,
  );
  const outage = await measureOutage(edge, ips, os);
  const ps = sizes.protect;
  step(
    `11/11 origin protection: ${ps.rate}/s open loop for ${ps.durationMs / 1000} s per case, no limit, caps ${ps.limits.join(" / ")}, adaptive`,
  );
  const protect = await measureProtect(edge, cleanup, ips, ps);
  const anchor = await measureAnchor(cleanup, ips, sizes.anchor, step);
  step(
    `13 the SMS case: ${sizes.sms.messages} messages at once to a queue route, ${sizes.sms.rate}/s global, two regions`,
  );
  const sms = await measureSms(join(BUILD_DIR, "index.js"), cleanup, sizes.sms);
  return { distance, outage, billed, protect, anchor, sms };
}

/** Prints the tables, writes the JSON and (for a full run) the charts, and says where. */
function report(
  result: BenchResult & { name: string; started_at: string; quick: boolean; duration_s: number },
  started: Date,
): void {
  console.log(render(result));
  const file = writeResults(result.name, started, result, !result.quick);
  console.log(
    `\nresults: ${relative(process.cwd(), file)}${result.quick ? "" : " and bench/results/latest.json"} (${result.duration_s} s)`,
  );
  // drawn in a quick run too (a check of the chart code), written only for a full one, like latest.json
  const charts = chartsFromResults(result);
  console.log(
    result.quick
      ? `charts: ${charts.length} drawn, not written (--quick)`
      : `charts: ${writeCharts(CHARTS_DIR, charts).length} SVG files in bench/results/charts`,
  );
}

/** `--only anchor`: section 12 alone, its own JSON, and (unless `--quick`) the docs' table. */
async function runAnchorOnly(cleanup: Cleanup, quick: boolean, started: Date, step: (what: string) => void) {
  const anchor = await measureAnchor(cleanup, new IpSource(), quick ? ANCHOR_QUICK : ANCHOR_FULL, step);
  const out: string[] = [];
  renderAnchorSection(out, anchor);
  return reportSectionAlone({
    section: "anchor",
    redis: "(section 12's own redis-server)",
    quick,
    started,
    payload: anchor,
    out,
    passed: "checks: every request allowed, no stray requests",
    publish: (meta) => publishAnchor(anchor, meta),
  });
}

/** `--only sms`: section 13 alone (the Worker built first), its own JSON, and (unless `--quick`) its docs table. */
async function runSmsOnly(cleanup: Cleanup, quick: boolean, started: Date, step: Step): Promise<number> {
  const o = quick ? SMS_QUICK : SMS_FULL;
  step("building the Worker with wrangler (.wrangler/bench-build)");
  const bundle = await buildWorker(cleanup);
  step(`13 the SMS case: ${o.messages} messages at once to a queue route, ${o.rate}/s global, two regions`);
  const sms = await measureSms(bundle, cleanup, o);
  const out: string[] = [];
  renderSmsSection(out, sms);
  return reportSectionAlone({
    section: "sms",
    redis: "(section 13's own redis-servers)",
    quick,
    started,
    payload: sms,
    out,
    passed: "checks: every message delivered once, no second over the limit",
    publish: (meta) => publishSms(sms, meta),
  });
}

/** What one section run alone (`--only <section>`) has measured and printed. */
interface SectionAlone {
  section: "anchor" | "sms";
  /** The Redis the environment record names. */
  redis: string;
  quick: boolean;
  started: Date;
  payload: { problems: string[] };
  /** The section's table, as printed; the checks' line and the problems are added. */
  out: string[];
  passed: string;
  publish: (meta: { started: Date; revision: string; command: string }) => string[];
}

/** Prints the section with its checks, writes its own JSON (never latest.json) and, unless quick, its docs table. */
function reportSectionAlone(r: SectionAlone): number {
  const finished = new Date();
  const env = environment(r.redis);
  const name = `bench-${r.section}${r.quick ? "-quick" : ""}`;
  const result = {
    name,
    started_at: r.started.toISOString(),
    finished_at: finished.toISOString(),
    duration_s: round((finished.getTime() - r.started.getTime()) / 1000, 1),
    quick: r.quick,
    environment: env,
    [r.section]: r.payload,
    problems: r.payload.problems,
  };
  r.out.push("", r.payload.problems.length === 0 ? r.passed : "PROBLEMS:");
  r.out.push(...r.payload.problems.map((p) => `  - ${p}`));
  console.log(r.out.join("\n"));
  console.log(`\nresults: ${relative(process.cwd(), writeResults(name, r.started, result, false))}`);
  if (!r.quick)
    docsWritten(r.publish({ started: r.started, revision: env.git, command: `npm run bench -- --only ${r.section}` }));
  return 0;
}

function docsWritten(files: string[]): void {
  console.log(
    files.length > 0
      ? `docs: the generated tables rewritten in ${files.join(", ")}`
      : "docs: the generated tables unchanged",
  );
}

/**
 * Sections 6 and 7, on the bench Redis before anything else uses it. Afterwards the script cache
 * is flushed: section 1's cold start needs a Redis that has never seen decide.lua.
 */
async function measureEarly(
  stack: BenchStack,
  cleanup: Cleanup,
  sizes: Sizes,
  step: Step,
): Promise<{ memory: MemoryResult; boundary: BoundaryResult }> {
  const source = decideLuaForRedis();
  const call = (await importDecide()).scriptCall;
  step(
    `6/11 Redis memory per bucket (${sizes.memoryBuckets} buckets per algorithm, MEMORY USAGE), while wrangler builds`,
  );
  const memory = await measureMemory(stack.redis.url, cleanup, call, source, sizes.memoryBuckets);
  step("7/11 boundary effect: decide.lua with a test clock (EVAL), 100 per second, greedy clients");
  const boundary = await measureBoundary(stack.resp, call, source);
  const flushed = await stack.resp.send(["SCRIPT", "FLUSH", "SYNC"]);
  if (!Buffer.isBuffer(flushed) || flushed.toString("utf8") !== "OK")
    throw new Error(`SCRIPT FLUSH answered ${JSON.stringify(replyToJs(flushed))}`);
  step("6/11 and 7/11 done");
  return { memory, boundary };
}

/** Anything that makes a figure untrustworthy or misses the design target. */
function findProblems(d: DecisionResult, l: LatencyResult): string[] {
  const problems: string[] = [];
  for (const r of d.routes) {
    if (r.script_calls_per_decision !== 1)
      problems.push(
        `${r.label}: ${r.script_calls_per_decision} top-level script calls per decision (target exactly 1)`,
      );
    if (r.http_requests_per_decision !== 1)
      problems.push(
        `${r.label}: ${r.http_requests_per_decision} HTTP requests carrying the script per decision (target exactly 1)`,
      );
    if (r.decision_http_requests + r.other_http_requests !== r.http_requests)
      problems.push(
        `${r.label}: the bridge received ${r.http_requests} HTTP requests, the tap forwarded ${r.decision_http_requests + r.other_http_requests}`,
      );
    if (r.other_http_requests > r.other_http_allowed)
      problems.push(
        `${r.label}: ${r.other_http_requests} background HTTP requests in ${r.elapsed_s} s (metrics flush, lists and overrides refresh: at most ${r.other_http_allowed}); ${JSON.stringify(r.other_http_commands)}`,
      );
    if (r.unreadable_http_requests > 0)
      problems.push(`${r.label}: ${r.unreadable_http_requests} HTTP requests the tap could not read as Upstash REST`);
    if (Object.keys(r.other_commands).length > 0)
      problems.push(
        `${r.label}: Redis commands from neither the script nor a background request: ${JSON.stringify(r.other_commands)}`,
      );
    if (Object.keys(r.failed_commands).length > 0)
      problems.push(`${r.label}: failed Redis calls: ${JSON.stringify(r.failed_commands)}`);
    if (r.origin_requests !== r.decisions)
      problems.push(`${r.label}: origin received ${r.origin_requests} requests for ${r.decisions} allowed decisions`);
    if (Object.keys(r.unexpected_outcomes).length > 0)
      problems.push(`${r.label}: not every request was allowed: ${JSON.stringify(r.unexpected_outcomes)}`);
  }
  for (const v of [...l.sequential.variants, ...l.concurrent.variants]) {
    if (Object.keys(v.unexpected_outcomes).length > 0)
      problems.push(`latency ${v.label}: unexpected outcomes ${JSON.stringify(v.unexpected_outcomes)}`);
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Output

/** What `main` writes to the JSON, which the printed tables are read from too. */
interface BenchResult {
  environment: ReturnType<typeof environment>;
  sizes: Sizes;
  decisions: DecisionResult;
  latency: LatencyResult;
  scripts: ScriptResult;
  split: SplitResult;
  regions: RegionsResult;
  memory: MemoryResult;
  boundary: BoundaryResult;
  distance: DistanceResult;
  outage: OutageResult;
  billed: BilledResult;
  protect: ProtectResult;
  anchor: AnchorResult;
  sms: SmsResult;
  problems: string[];
}

function render(result: BenchResult): string {
  const { environment: env, decisions: d, latency: l, scripts: s, split: sp, regions: rg } = result;
  const { memory: mem, boundary: bd, problems, sizes } = result;
  const edge = { distance: result.distance, outage: result.outage, billed: result.billed, protect: result.protect };
  const out: string[] = [];
  out.push(
    `sluice bench (${env.git}) on ${env.cpus}× ${env.cpu_model}, node ${env.node}, redis ${env.redis}, miniflare ${env.miniflare}`,
  );
  renderDecisions(out, d, sizes);
  renderLatency(out, l);
  renderScripts(out, s);
  renderSplit(out, sp);
  renderRegions(out, rg);
  renderMemory(out, mem);
  renderBoundary(out, bd);
  renderDistance(out, edge.distance);
  renderOutage(out, edge.outage);
  renderBilled(out, edge.billed);
  renderFeatures(out, edge.billed.features);
  renderProtect(out, edge.protect);
  renderAnchorSection(out, result.anchor);
  renderSmsSection(out, result.sms);
  renderChecks(out, problems);
  return out.join("\n");
}

const calls = (r: DecisionCounts) =>
  Object.entries(r.script_calls)
    .map(([c, n]) => `${c} ${n}${r.failed_commands[c] ? `, ${r.failed_commands[c]} failed` : ""}`)
    .join(" + ") || "none";
const inside = (r: DecisionCounts) =>
  Object.entries(r.inside_script_per_decision)
    .map(([c, n]) => `${c.toUpperCase()} ${n}`)
    .join(" + ");
const other = (r: DecisionCounts) =>
  `${r.other_http_requests}${
    r.other_http_requests > 0
      ? ` (${Object.entries(r.other_http_commands)
          .map(([c, n]) => `${c.toUpperCase()} ${n}`)
          .join(", ")})`
      : ""
  }`;

function renderDecisions(out: string[], d: DecisionResult, sizes: Sizes): void {
  out.push(
    "",
    `1. Redis requests per decision (${sizes.decisions} allowed requests per route, each from a distinct CF-Connecting-IP)`,
  );
  out.push(
    table(
      [
        "route",
        "HTTP req / decision",
        "script calls / decision",
        "commands inside the script / decision",
        "background HTTP req in all",
      ],
      [...d.routes, d.cold].map((r) => [
        r === d.cold ? "cold start (1 request)" : r.label,
        fmt(r.http_requests_per_decision),
        `${fmt(r.script_calls_per_decision)} (${calls(r)})`,
        `${fmt(r.inside_script_total_per_decision)} (${inside(r)})`,
        r === d.cold ? other(r) : `${other(r)} in ${r.elapsed_s.toFixed(1)} s`,
      ]),
    ),
  );
  out.push(
    "   HTTP req = requests carrying the script call, counted by a tap between the Worker and the Upstash-REST bridge; script calls =",
    "   EVALSHA + EVAL reaching Redis (INFO commandstats). commandstats also counts the commands a script runs (TIME, MGET, SET; HMGET",
    "   of the overrides only while the isolate has no trusted copy of them), so those are shown separately: they are not extra round",
    "   trips, but Upstash bills each. Background = the Worker's other HTTP requests, off the request path (waitUntil): metrics flush and",
    "   deny/allow lists refresh, each at most every 5 s per isolate, and the route's overrides (HGETALL) at most every 0.8 s (checked).",
    "   Cold start: the first decision on a Redis whose script cache lacks decide.lua, in a fresh isolate: it sends the script's body",
    "   (EVAL, one request; EVALSHA once it has seen Redis run it). Its first request also waits for the first load of the lists (HGETALL).",
  );
}

function renderLatency(out: string[], l: LatencyResult): void {
  const seq = l.sequential;
  out.push(
    "",
    `2. Latency of an allowed request: dispatchFetch wall time in ms (${seq.requests} sequential per variant after ${seq.warmup} warm-up, interleaved in blocks of ${seq.block})`,
  );
  const added = new Map(seq.added.map((a) => [a.variant, a]));
  out.push(
    table(
      ["variant", "median", "p90", "p99", "added median", "added p99"],
      seq.variants.map((v) => {
        const a = added.get(v.key);
        return [
          v.label,
          ms(v.latency.median_ms),
          ms(v.latency.p90_ms),
          ms(v.latency.p99_ms),
          a ? signed(a.added_median_ms) : "—",
          a ? signed(a.added_p99_ms) : "—",
        ];
      }),
    ),
  );
  renderConcurrent(out, l.concurrent);
}

function renderConcurrent(out: string[], con: LatencyResult["concurrent"]): void {
  out.push(
    "",
    `   ${con.clients} concurrent clients, ${con.requests} requests per variant (${con.rounds} rounds, order alternated)`,
  );
  const cAdded = new Map(con.added.map((a) => [a.variant, a]));
  out.push(
    table(
      ["variant", "median", "p90", "p99", "req/s", "vs off"],
      con.variants.map((v) => {
        const a = cAdded.get(v.key);
        return [
          v.label,
          ms(v.latency.median_ms),
          ms(v.latency.p90_ms),
          ms(v.latency.p99_ms),
          v.throughput_rps.toFixed(0),
          a?.throughput_ratio !== undefined ? `${a.throughput_ratio.toFixed(2)}×` : "—",
        ];
      }),
    ),
  );
  out.push(
    "   Everything (Worker in workerd, bridge, origin, Redis, this driver) shares one machine: absolute figures are local, the difference is the point.",
  );
}

function renderScripts(out: string[], s: ScriptResult): void {
  const o = s.options;
  out.push(
    "",
    `3. EVALSHA of lua/decide.lua vs INCR (redis-benchmark -n ${o.requests} -c ${o.clients} -r ${o.keyspace}, straight to Redis)`,
  );
  out.push(
    table(
      ["command", "ops/s", "p50 ms", "ratio to INCR"],
      s.runs.map((r) => [
        r.label,
        r.ops_per_sec.toFixed(0),
        r.p50_ms === null ? "—" : r.p50_ms.toFixed(3),
        `${r.ratio_to_incr.toFixed(2)}×`,
      ]),
    ),
  );
  out.push(
    `   ${o.keyspace} random keys per limit (each case its own); script ${s.sha}. KEYS: one bucket per limit, and`,
    "   no override hash (the Worker passes the overrides it knows in ARGV); ARGV: mode n override_idx, then per limit",
    "   algo rate period_us burst cost shadow share_idx demand_idx p1 p2 override_all override_own lease_ask lease_epoch",
    '   lease_granted lease_left floor window (algo 1 token, 2 leaky, 3 fixed, 4 sliding window, 5 concurrency; "" for no override, or a window on UTC):',
    ...s.limits.map(
      (x, _, all) =>
        `     ${`${x.label}:`.padEnd(Math.max(...all.map((y) => y.label.length)) + 1)}  ${x.argv.slice(0, 3).join(" ")} │ ${chunks(
          x.argv.slice(3).map((a) => (a === "" ? '""' : a)),
          (x.argv.length - 3) / x.limits,
        )
          .map((c) => c.join(" "))
          .join(" │ ")}`,
    ),
  );
}

function renderChecks(out: string[], problems: string[]): void {
  out.push("");
  if (problems.length === 0) {
    out.push(
      "checks: every decision took exactly 1 HTTP request and 1 script call (background requests: at most one per task and 5 s, and one overrides refresh",
      "        per 0.8 s); every request was allowed",
      "        (from EU: decided in eu, the global limit in the home Redis);",
      `        no split variant admitted more than rate + burst in any one-second window; the cut-off region's share never grew;`,
      "        on the simulated clock no algorithm admitted more in one second than its ceiling;",
      "        at every distance nothing was admitted over the ideal, nothing degraded, every token came back; in every outage no 5xx",
      "        under local and open, local within its bound, every isolate back on Redis within 1 s; billed commands within target;",
      "        every feature row answered as expected, MONITOR and commandstats agreed; no fixed cap was exceeded at the origin.",
    );
  } else out.push("PROBLEMS:", ...problems.map((p) => `  - ${p}`));
}

function renderSplit(out: string[], sp: SplitResult): void {
  const sc = sp.scenario;
  const regions = Object.keys(sc.demand);
  out.push(
    "",
    `4. Split limit across four regions (simulated clock, ${sc.seconds} s): ${sc.rate}/s in all, burst ${sc.burst}; offered ${regions.map((r) => `${r} ${sc.demand[r]}`).join(", ")} /s`,
  );
  out.push(
    table(
      [
        "variant",
        "seconds",
        "admitted/s",
        `% of ${sc.rate}`,
        ...regions.map((r) => `${r} admitted/offered`),
        "worst 1 s",
        `over ${sc.rate}`,
      ],
      sp.variants.map((v) => [
        v.short,
        `${v.measured_seconds.from}–${v.measured_seconds.to - 1}`,
        v.admitted_per_s.toFixed(1),
        `${v.admitted_pct_of_rate.toFixed(1)}%`,
        ...regions.map((r) => {
          const f = v.regions.find((x) => x.region === r);
          return f ? `${f.admitted_per_s.toFixed(1)}/${fmt(f.offered_per_s)}` : "—";
        }),
        String(v.worst_second),
        `${v.overshoot >= 0 ? "+" : ""}${v.overshoot}`,
      ]),
    ),
  );
  renderCutOffs(out, sp);
  out.push(
    "   seconds = the seconds the means cover: after the first rebalance has taken effect (static: after the first second), or after the cut.",
    "   worst 1 s = most admitted in any one-second window of the whole run (sliding in 10 ms steps); over = worst − rate (negative: under).",
    "   Buckets follow decide.lua's arithmetic and shares come from the production splitShares (dev/split-simulation.ts): exact, not sampled.",
  );
}

function renderCutOffs(out: string[], sp: SplitResult): void {
  const sc = sp.scenario;
  for (const v of sp.variants) {
    const c = v.cut_off;
    if (!c) continue;
    const share = (x: { rate: number; burst: number } | null) => (x ? `${x.rate}/s burst ${x.burst}` : "none");
    out.push(
      `   ${v.short}: ${c.region} unreachable for the rebalancer from second ${c.from_second}, its demand surging to ${c.demand_per_s}/s; share at the cut ${share(c.share_at_cut)},` +
        ` largest after ${share(c.max_share_after_cut)}; ${c.region} admitted ${c.admitted_per_s_after_cut.toFixed(1)}/s after the cut; worst one-second window ${v.worst_second} (ceiling rate + burst = ${sc.rate + sc.burst}).`,
    );
  }
}

function renderRegions(out: string[], rg: RegionsResult): void {
  const o = rg.options;
  out.push(
    "",
    `5. global vs region limit, requests from ${rg.from.continent}/${rg.from.colo}, home Redis (us) made far by latency injected in its bridge: dispatchFetch wall time in ms`,
    `   (${o.requests} sequential per route and latency after ${o.warmup} warm-up, routes interleaved in blocks of ${o.block}; eu's Redis untouched)`,
  );
  out.push(
    table(
      [
        "injected",
        "route",
        "median",
        "p99",
        "vs +0 ms median",
        "HTTP req / decision to home / eu",
        "background HTTP home / eu",
        "added median (global − region)",
        "added p99",
      ],
      regionRows(rg),
    ),
  );
  out.push(
    "   Every response checked: 200, Sluice-Decision allow, Sluice-Region eu. HTTP req = requests carrying the script each Redis received per",
    "   decision (counted by a tap in front of each bridge): the region limit is decided in eu's Redis, the global one in the home Redis, one",
    "   round trip each. Background = the Worker's other requests in all (metrics flush, lists refresh: home region, off the request path).",
    "   timeout_ms is 1000, so nothing is degraded.",
  );
}

function regionRows(rg: RegionsResult): string[][] {
  const base = rg.steps[0];
  const baseMedian = (key: string) => base?.routes.find((r) => r.key === key)?.latency.median_ms;
  return rg.steps.flatMap((st) =>
    st.routes.map((r, i) => {
      const b = baseMedian(r.key);
      return [
        i === 0 ? `+${st.injected_ms} ms` : "",
        r.label,
        ms(r.latency.median_ms),
        ms(r.latency.p99_ms),
        b === undefined || st === base ? "—" : signed(r.latency.median_ms - b),
        `${fmt(r.home_requests_per_decision)} / ${fmt(r.eu_requests_per_decision)}`,
        `${r.home_other_requests} / ${r.eu_other_requests}`,
        r.key === "global" ? signed(st.added_median_ms) : "",
        r.key === "global" ? signed(st.added_p99_ms) : "",
      ];
    }),
  );
}

function renderMemory(out: string[], m: MemoryResult): void {
  out.push(
    "",
    `6. Redis memory per bucket (${m.buckets} buckets per algorithm, one admitted request each: EVALSHA of decide.lua, keys named as the Worker names them; ${m.limit.replace(/, one.*$/, "")})`,
  );
  out.push(
    table(
      [
        "algorithm",
        "MEMORY USAGE median (min–max)",
        "same by plain SET",
        "used_memory / bucket",
        "TTL after 1 request",
        "value (GET)",
        "value bytes",
      ],
      m.runs.map((r) => [
        r.label,
        `${r.memory_usage.median} B (${r.memory_usage.min}–${r.memory_usage.max})`,
        `${r.plain_set_memory_usage} B`,
        r.used_memory_per_bucket !== null
          ? `${r.used_memory_per_bucket.toFixed(1)} B`
          : r.keys_found !== r.buckets
            ? `— (${r.keys_found}/${r.buckets} keys left)`
            : "— (did not settle)",
        duration(r.sample.pttl_ms),
        r.sample.value,
        String(r.sample.value_bytes),
      ]),
    ),
  );
  const key = m.runs[0]?.sample;
  out.push(
    `   key: ${key ? `${key.key} (${key.key_bytes} bytes: {key_prefix}:{route}:{limit}:{128-bit hash})` : "—"}. MEMORY USAGE counts the key, the value object and its`,
    "   hash-table entry; used_memory / bucket is the growth of INFO used_memory over the buckets ÷ buckets, which adds the expires-table",
    "   entry (every key has a TTL) and the tables' slots. Values grow by a few digits with the figures (per-second limits: longer timestamps).",
    "   same by plain SET = MEMORY USAGE of the same key and value written by a client's SET: where it is smaller, the script's SET kept the value",
    "   in a larger string object that Redis reused from an earlier command of the same script (its Lua argument cache).",
  );
}

function renderBoundary(out: string[], b: BoundaryResult): void {
  out.push(
    "",
    `7. Boundary effect, measured: limit ${b.limit.rate} per ${b.limit.period}, production decide.lua with a test clock (EVAL on the bench Redis; windows start at 0 s, 1 s, 2 s)`,
    ...b.scenarios.map((sc, i) => `   ${String.fromCharCode(65 + i)}: ${sc.label} (${sc.requests} requests)`),
  );
  const letter = new Map(b.scenarios.map((sc, i) => [sc.key, String.fromCharCode(65 + i)]));
  out.push(
    table(
      [
        "",
        "algorithm",
        "admitted",
        "most in any 1 s (from)",
        "most in any 100 ms (from)",
        "in [2 s, 3 s)",
        "ceiling in 1 s",
      ],
      b.runs.map((r, i) => [
        i === 0 || b.runs[i - 1]?.scenario !== r.scenario ? (letter.get(r.scenario) ?? "") : "",
        r.label,
        `${r.admitted}/${r.requests}`,
        `${r.max_1s.admitted} (${r.max_1s.from_s.toFixed(3)} s)`,
        `${r.max_100ms.admitted} (${r.max_100ms.from_s.toFixed(3)} s)`,
        String(r.last_second),
        `${r.ceiling_1s} = ${r.ceiling_why}`,
      ]),
    ),
  );
  out.push(
    "   most in any 1 s / 100 ms = most admitted requests in any interval [t, t + 1 s) / [t, t + 100 ms) of the run, exact (every admitted time is kept).",
    "   The clock: decide.lua's one redis.call('TIME') reads two trailing ARGV (s, µs) instead, and TTLs get a day added, as in the tests.",
  );
}

function renderDistance(out: string[], d: DistanceResult): void {
  const o = d.options;
  out.push(
    "",
    `8. Distance: Redis made far by the bridge's delay, one database (home), requests from ${d.from.continent}/${d.from.colo} (region eu, no database of its own),`,
    `   ${d.isolates} isolates sharing the load, default timeout_ms / max_timeout_ms / on_store_error; two clients at once, ${o.rate} req/s each for ${o.durationMs / 1000} s`,
  );
  const leases = d.leases_detected;
  out.push(
    table(
      [
        "Redis",
        "client",
        "admitted / ideal (exact)",
        "under-admission",
        "degraded",
        "p50 allowed",
        "p99 allowed",
        "Redis req / decision",
        "decided w/o request",
        "bucket after stop / +settle",
      ],
      distanceRows(d),
    ),
  );
  out.push(
    "   Redis +N ms = the bridge's delay: ⌊N/2⌋ ms before Redis runs the command, the rest after, so N is the round trip it adds; (RTT +x) is",
    "   that added round trip as measured (median PING through the bridge minus the same at +0 ms). ideal: under = every request; over =",
    `   burst + rate × duration; (exact) = what Redis alone admits for the actual send times, burst + ⌊rate × (last send − first send)⌋.`,
    "   under-admission: over = ideal − admitted; under = tokens missing from the bucket right after the client stopped (admin peek, should be",
    "   ≥ burst − 1: the client never drains a 100/s bucket at 40/s). Redis req / decision = HTTP requests carrying a script call for the",
    "   client's route (decisions, lease renewals and give-backs), counted by a tap; a cached refusal (bucket known closed) needs none.",
    leases
      ? "   Leases are in this build: some decisions of the under-limit client were made without a Redis request."
      : "   No decision was made without a Redis request: no token leases in this build (the under-admission of leases is not measurable here).",
  );
}

function distanceRows(d: DistanceResult): string[][] {
  return d.steps.flatMap((s) =>
    s.clients.map((c, i) => [
      i === 0 ? `+${s.injected_ms} ms (RTT +${s.effective_added_rtt_ms.toFixed(1)})` : "",
      c.label,
      `${c.admitted} / ${c.ideal}${c.schedule_exact === null ? "" : ` (${c.schedule_exact})`}`,
      c.key === "over" ? String(c.under_admission) : c.bucket ? `${c.bucket.missing_right_after} tok.` : "—",
      String(c.degraded),
      c.p50_ms === null ? "—" : ms(c.p50_ms),
      c.p99_ms === null ? "—" : ms(c.p99_ms),
      fmt(c.redis_requests_per_decision),
      String(c.decided_without_request),
      c.bucket ? `${c.bucket.right_after} / ${c.bucket.after_settle} of ${c.bucket.burst}` : "—",
    ]),
  );
}

function renderOutage(out: string[], o: OutageResult): void {
  const op = o.options;
  out.push(
    "",
    `9. Outage: Redis next door, then hung (bridge takes requests, never answers) or refusing (drops every connection); one client at ${op.rate} req/s for ${op.durationMs / 1000} s`,
    `   on ${o.limit.rate}/s burst ${o.limit.burst}, ${o.isolates} isolates, requests from ${o.from.continent}/${o.from.colo}, default budget; then the bridge back to normal`,
  );
  // measured policy by policy (each its own isolates), shown mode by mode
  const runs = [...o.runs].sort((a, b) => (a.mode === b.mode ? 0 : a.mode === "hang" ? -1 : 1));
  out.push(
    table(
      [
        "Redis",
        "on_store_error",
        "admitted / sent",
        "local bound",
        "degraded",
        "429",
        "5xx",
        "p50 (all)",
        "p99 (all)",
        "bridge req (hung/refused)",
        "back on Redis after, per isolate",
      ],
      runs.map((r, i) => [
        i === 0 || runs[i - 1]?.mode !== r.mode ? (r.mode === "hang" ? "hung" : "refusing") : "",
        r.policy === "local" ? "local (default)" : r.policy,
        `${r.admitted} / ${r.requests}`,
        r.bound === null ? "—" : String(r.bound),
        String(r.degraded),
        String(r.rejected_429),
        String(r.server_errors),
        r.p50_ms === null ? "—" : ms(r.p50_ms),
        r.p99_ms === null ? "—" : ms(r.p99_ms),
        `${r.bridge_requests} (${r.mode === "hang" ? r.bridge_hung : r.bridge_refused})`,
        r.recovery_ms.map((x) => (x === null ? "never" : `${x.toFixed(0)} ms`)).join(" / "),
      ]),
    ),
  );
  out.push(
    `   local bound = isolates × (burst + rate × T), T from the first request sent to the last answer. bridge req = HTTP requests that reached`,
    "   the bridge during the run (the circuit per store keeps most requests from trying). back on Redis = from the bridge back to normal until",
    "   the isolate's first answer decided by Redis (asked every 10 ms).",
  );
}

function renderBilled(out: string[], b: BilledResult): void {
  out.push(
    "",
    `10. Billed commands per decision (${b.decisions} allowed decisions per row through one Worker; INFO commandstats: EVALSHA/EVAL + every command the script runs)`,
  );
  out.push(
    table(
      ["decisions", "billed / decision", "by command", "target", "script HTTP req / decision"],
      b.rows.map((r) => [
        r.label,
        fmt(r.billed_per_decision),
        Object.entries(r.per_decision)
          .map(([c, n]) => `${c.toUpperCase()} ${fmt(n)}`)
          .join(" + "),
        r.target === null ? "—" : String(r.target),
        fmt(r.script_requests_per_decision),
      ]),
    ),
  );
  out.push(
    "   Upstash bills every command, those a script runs included. Background commands (lists, overrides copy, metrics) are left out and kept in the JSON.",
  );
}

function duration(ms: number): string {
  if (ms < 0) return ms === -1 ? "none" : "—";
  if (ms >= 60_000) return `${(ms / 60_000).toFixed(1)} min`;
  return `${(ms / 1000).toFixed(1)} s`;
}

function chunks<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

const ms = (n: number): string => n.toFixed(3);
const signed = (n: number): string => `${n >= 0 ? "+" : ""}${n.toFixed(3)}`;

// ---------------------------------------------------------------------------------------------
// Results and environment

/**
 * Every run goes to bench/results/runs/ (ignored by git: a run is committed only when the docs cite
 * it, by moving it up to bench/results/); a full run also replaces latest.json, which is committed.
 * A quick run writes its own file only: latest.json always holds full-size figures.
 */
function writeResults(name: string, started: Date, result: unknown, latest: boolean): string {
  mkdirSync(RUNS_DIR, { recursive: true });
  const stamp = started
    .toISOString()
    .replace(/:/g, "-")
    .replace(/\.\d+Z$/, "Z");
  const text = `${JSON.stringify(result, null, 2)}\n`;
  const file = join(RUNS_DIR, `${name}-${stamp}.json`);
  for (const target of latest ? [file, join(RESULTS_DIR, "latest.json")] : [file]) {
    const tmp = target.replace(/\.json$/, ".tmp.json");
    writeFileSync(tmp, text);
    renameSync(tmp, target);
  }
  return file;
}

async function serverVersion(info: Promise<unknown>): Promise<string> {
  const reply = await info;
  return Buffer.isBuffer(reply) ? (/redis_version:(\S+)/.exec(reply.toString("utf8"))?.[1] ?? "unknown") : "unknown";
}

function environment(redis: string) {
  const version = (pkg: string): string => {
    try {
      return (
        (JSON.parse(readFileSync(resolve("node_modules", pkg, "package.json"), "utf8")) as { version?: string })
          .version ?? "unknown"
      );
    } catch {
      return "unknown";
    }
  };
  let git = "no git";
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    }).trim();
    const dirty =
      execFileSync("git", ["status", "--porcelain"], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      }).trim() !== "";
    git = `${head}${dirty ? "+dirty" : ""}`;
  } catch {
    // not a git checkout
  }
  const cpu = cpus();
  return {
    git,
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    cpus: cpu.length,
    cpu_model: cpu[0]?.model.trim() ?? "unknown",
    memory_gb: round(totalmem() / 2 ** 30, 1),
    redis,
    miniflare: version("miniflare"),
    wrangler: version("wrangler"),
  };
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
