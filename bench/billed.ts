/**
 * Section 10, billed commands per decision: Upstash bills every command a script runs as well as
 * the EVALSHA/EVAL itself. `INFO commandstats` of a real redis-server counts both (the approach of
 * test/integration/decision-cost.test.ts, here through the Worker): allowed requests through one
 * Worker on the section's own Redis, commandstats read before and after, the script's commands
 * (and nothing the Worker's background work sends) summed per decision. Then the rows of
 * `billed-features.ts`: what each #14 feature costs, on the request path and after it.
 */
import type { Miniflare } from "miniflare";
import type { SluiceInput } from "../src/config/schema.js";
import { DECIDE_COMMANDS } from "../src/features/rate-limit/decision/commands.js";
import { type FeatureRow, featureRoutes, measureFeatures, startUsageOrigin } from "./billed-features.js";
import { type EdgeStack, FROM_EU, outcomesOf, sleep } from "./edge.js";
import { startMonitor } from "./monitor.js";
import { hit } from "./request.js";
import { type Cleanup, commandStats, disposeWorker, statsDelta } from "./stack.js";
import { type IpSource, round } from "./stats.js";
import { startTap } from "./tap.js";

/** What the script sends and may run inside; the Worker's background work uses others. */
const SCRIPT_COMMANDS = DECIDE_COMMANDS;

const BILLED: SluiceInput = {
  key_prefix: "bench-billed",
  home_region: "us",
  regions: { us: { continents: ["NA"] }, eu: { continents: ["EU"] } },
  routes: [
    { name: "one", match: "/one/*", limits: [{ name: "per-ip", rate: 1000, period: "1s" }] },
    {
      name: "three",
      match: "/three/*",
      limits: [
        { name: "per-ip", rate: 1000, period: "1s" },
        { name: "per-path", key: "path", algorithm: "fixed_window", rate: 100_000, period: "1s" },
        { name: "site", key: "global", algorithm: "sliding_window", rate: 100_000, period: "1s" },
      ],
    },
  ],
};

export interface BilledRow {
  key: string;
  label: string;
  limits: number;
  decisions: number;
  /** Script commands per decision, by command, and their sum: the billed commands. */
  per_decision: Record<string, number>;
  billed_per_decision: number;
  /** The target (one limit 4, three at most 6); null for the busy-client row, which has none. */
  target: number | null;
  /** HTTP requests carrying a script call, per decision (the bridge's count). */
  script_requests_per_decision: number;
  /** Commands from the Worker's background work in the same interval (not billed to decisions here). */
  background_commands: Record<string, number>;
  outcomes: Record<string, number>;
}

export interface BilledResult {
  decisions: number;
  rows: BilledRow[];
  /** What each #14 feature costs, request path and background apart (billed-features.ts). */
  features: FeatureRow[];
  problems: string[];
}

/** The rows where every request comes from a client nobody used before. */
const FRESH_CLIENT_ROWS = [
  { key: "one", label: "1 limit (token bucket), a new client each request", limits: 1, target: 4, path: "/one/item" },
  {
    key: "three",
    label: "3 limits (token bucket, fixed window, sliding window), a new client each",
    limits: 3,
    target: 6,
    path: "/three/item",
  },
];

export async function measureBilled(
  edge: EdgeStack,
  cleanup: Cleanup,
  ips: IpSource,
  decisions: number,
): Promise<BilledResult> {
  // the Worker's origin reports x-usage-tokens (the response-cost row) and answers diverted requests
  const origin = await startUsageOrigin(cleanup);
  const tap = await startTap(edge.bridge.url, cleanup, "billed");
  const config: SluiceInput = { ...BILLED, routes: [...(BILLED.routes ?? []), ...featureRoutes(origin)] };
  const [mf] = (await edge.workers(1, config, tap.url, { ORIGIN_URL: origin })) as [Miniflare];
  const rows: BilledRow[] = [];
  let features: { rows: FeatureRow[]; problems: string[] };
  try {
    // the isolate's first requests wait for the lists and meet a Redis without the script: not counted
    for (const path of ["/one/item", "/three/item"])
      for (let i = 0; i < 2; i++) await hit(mf, path, ips.take(), FROM_EU);
    const busy = ips.take();
    for (const what of FRESH_CLIENT_ROWS) rows.push(await row(edge, mf, { ...what, ip: () => ips.take() }, decisions));
    const label = "1 limit, one client sending them all (leases, if any, amortise)";
    const one = { key: "one_busy", label, limits: 1, target: null, path: "/one/item", ip: () => busy };
    rows.push(await row(edge, mf, one, decisions));
    const monitor = await startMonitor(edge.redis.url, edge.resp);
    try {
      features = await measureFeatures({ edge, mf, tap, monitor, ips }, decisions);
    } finally {
      monitor.close();
    }
  } finally {
    await disposeWorker(mf);
  }
  return { decisions, rows, features: features.rows, problems: [...rowProblems(rows), ...features.problems] };
}

function rowProblems(rows: BilledRow[]): string[] {
  const problems: string[] = [];
  for (const r of rows) {
    if (r.target !== null && r.billed_per_decision > r.target)
      problems.push(
        `billed commands, ${r.label}: ${r.billed_per_decision} per decision (target ${r.target}) ${JSON.stringify(r.per_decision)}`,
      );
    const bad = Object.keys(r.outcomes).filter((k) => k !== "200 allow");
    if (bad.length > 0)
      problems.push(`billed commands, ${r.label}: not every request was allowed ${JSON.stringify(r.outcomes)}`);
  }
  return problems;
}

async function row(
  edge: EdgeStack,
  mf: Miniflare,
  what: { key: string; label: string; limits: number; target: number | null; path: string; ip: () => string },
  n: number,
): Promise<BilledRow> {
  // One decision first, outside the count: the isolate refreshes its copy of the route's overrides
  // (off the request path) only while the route is in use, and a route idle for over a second would
  // have its first counted decision read them in the script (one HMGET; docs/operating.md, Admin API).
  await hit(mf, what.path, what.ip(), FROM_EU);
  await sleep(150);
  const before = await commandStats(edge.resp);
  const bridgeBefore = edge.bridge.counts();
  const hits = [];
  for (let i = 0; i < n; i++) hits.push(await hit(mf, what.path, what.ip(), FROM_EU));
  await sleep(200); // what the last requests deferred (waitUntil) reaches Redis
  const delta = statsDelta(before, await commandStats(edge.resp));
  const bridgeAfter = edge.bridge.counts();
  delete delta.info; // our own INFO commandstats
  const { perDecision, background, billed } = billedOf(delta, n);
  const scriptRequests = ["evalsha", "eval", "evalsha_ro", "eval_ro"].reduce(
    (sum, c) => sum + (bridgeAfter.requestsWith[c] ?? 0) - (bridgeBefore.requestsWith[c] ?? 0),
    0,
  );
  return {
    key: what.key,
    label: what.label,
    limits: what.limits,
    decisions: n,
    per_decision: perDecision,
    billed_per_decision: round(billed / n),
    target: what.target,
    script_requests_per_decision: round(scriptRequests / n),
    background_commands: background,
    outcomes: outcomesOf(hits),
  };
}

/** The script commands per decision (what is billed on the request path) and every other command. */
function billedOf(delta: ReturnType<typeof statsDelta>, n: number) {
  const script = new Set<string>(SCRIPT_COMMANDS);
  const perDecision: Record<string, number> = {};
  const background: Record<string, number> = {};
  let billed = 0;
  for (const [name, s] of Object.entries(delta)) {
    if (s.calls === 0) continue;
    if (script.has(name)) {
      perDecision[name] = round(s.calls / n);
      billed += s.calls;
    } else background[name] = s.calls;
  }
  return { perDecision, background, billed };
}
