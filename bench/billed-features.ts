/**
 * Section 10, second part: what each of the #14 features costs in Redis, per decision, split into
 * the request path (the decision's own script call) and the background (what the Worker sends after
 * the response, in `waitUntil`: a concurrency slot's release, a response cost's settle, a ban's
 * refusal count). HTTP requests are counted by a tap between the Worker and the bridge (script
 * requests by decide.lua's mode, others by their commands); billed commands (a script call plus
 * every command it runs) by `MONITOR`, which puts each command a script ran down to its call, and
 * checked against `INFO commandstats`.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { Miniflare } from "miniflare";
import type { SluiceInput } from "../src/config/schema.js";
import { type EdgeStack, FROM_EU, outcomesOf, sleep } from "./edge.js";
import type { Monitor, MonitoredCall } from "./monitor.js";
import { hit, type Hit } from "./request.js";
import { type Cleanup, commandStats, statsDelta } from "./stack.js";
import { type IpSource, round } from "./stats.js";
import { type Tap, tapDelta } from "./tap.js";

type RouteInput = NonNullable<SluiceInput["routes"]>[number];

/** What the bench's feature origin reports as a response's cost (`x-usage-tokens`): the reserve is 5, so each settle adds 2. */
export const USAGE_TOKENS = 7;

/** The routes of the feature rows; `divertUrl` answers the diverted requests. */
export function featureRoutes(divertUrl: string): RouteInput[] {
  const strict = { rate: 1, period: "1m" } as const;
  return [
    {
      name: "inflight",
      match: "/inflight/*",
      limits: [{ name: "slots", key: "ip", algorithm: "concurrency", limit: 10, lease: "30s" }],
    },
    {
      name: "reserve",
      match: "/reserve/*",
      limits: [{ name: "per-ip", rate: 1000, period: "1s", reserve: { critical: 0.25, default: 0.25 } }],
    },
    {
      name: "usage",
      match: "/usage/*",
      limits: [
        {
          name: "tokens",
          rate: 100_000,
          period: "1m",
          burst: 100_000,
          cost: { response: "header:x-usage-tokens", reserve: 5, max: 100 },
        },
      ],
    },
    {
      // not "ban": the route's name is in its keys, and a ban's keys are told apart by `:ban:`
      name: "banned",
      match: "/banned/*",
      limits: [{ name: "per-ip", ...strict, ban: { after: 5, within: "1m", for: ["1m"] } }],
    },
    {
      name: "divert",
      match: "/divert/*",
      on_limit: "divert",
      divert_url: divertUrl,
      limits: [{ name: "per-ip", ...strict }],
    },
    { name: "reject", match: "/reject/*", limits: [{ name: "per-ip", ...strict }] },
  ];
}

/** An origin that answers every request 200 and reports `x-usage-tokens: 7` (also the divert origin). */
export async function startUsageOrigin(cleanup: Cleanup): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { "content-type": "application/json", "x-usage-tokens": String(USAGE_TOKENS) });
    res.end('{"ok":true}');
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanup.add(
    "usage origin",
    () => new Promise<void>((done) => (server.closeAllConnections(), server.close(() => done()))),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

interface FeatureSpec {
  key: string;
  label: string;
  path: string;
  /** What each client sends, in order: the status each request must get (403: banned, not a decision). */
  expect: number[];
  /** Wait this long before each client's last request (a ban is written just after the refusal that earns it). */
  pauseBeforeLast?: number;
}

const SPECS: FeatureSpec[] = [
  { key: "concurrency", label: "concurrency limit (in-flight cap 10 per IP)", path: "/inflight/item", expect: [200] },
  { key: "reserve", label: "rate limit with a reserve (priorities)", path: "/reserve/item", expect: [200] },
  {
    key: "response_cost",
    label: "cost from the response (reserve 5, origin reports 7)",
    path: "/usage/item",
    expect: [200],
  },
  {
    key: "ban",
    label: "ban after 5 refusals: per client 1 allowed, 5 refused (the 5th bans), then 1 banned",
    path: "/banned/item",
    expect: [200, 429, 429, 429, 429, 429, 403],
    pauseBeforeLast: 50,
  },
  {
    key: "divert",
    label: 'on_limit = "divert": per client 1 allowed, 2 diverted',
    path: "/divert/item",
    expect: [200, 200, 200],
  },
  {
    key: "reject",
    label: "the same limit, on_limit = reject: 1 allowed, 2 refused",
    path: "/reject/item",
    expect: [200, 429, 429],
  },
];

/** Figures of one side (request path or background), per decision. */
export interface CostSide {
  http_per_decision: number;
  billed_per_decision: number;
  /** Billed commands per decision, by command (lower case). */
  by_command: Record<string, number>;
  /** HTTP requests in all, by kind (decide.lua's mode, or the commands of a plain request). */
  http_by_kind: Record<string, number>;
}

export interface FeatureRow {
  key: string;
  label: string;
  requests: number;
  /** Requests a limit decided (all but those the deny list answered). */
  decisions: number;
  outcomes: Record<string, number>;
  request_path: CostSide;
  background: CostSide;
  /** The Worker's routine background work in the same interval (lists, overrides copy, metrics): not the feature's. */
  routine: { http_by_kind: Record<string, number>; commands: Record<string, number> };
  /** Refused requests (429, or diverted): what the ban row's background is spent on. */
  refusals: number;
  /** Decisions made without Redis (its budget ran out on a loaded machine): no settle follows those. */
  degraded: number;
  /** Commands by name where MONITOR and INFO commandstats disagree over the row's window (none expected). */
  monitor_mismatch: Record<string, { monitor: number; commandstats: number }>;
}

export async function measureFeatures(
  ctx: { edge: EdgeStack; mf: Miniflare; tap: Tap; monitor: Monitor; ips: IpSource },
  decisions: number,
): Promise<{ rows: FeatureRow[]; problems: string[] }> {
  const rows: FeatureRow[] = [];
  const problems: string[] = [];
  for (const spec of SPECS) {
    const { row, bad } = await featureRow(ctx, spec, decisions);
    rows.push(row);
    if (bad.length > 0) problems.push(`feature cost, ${spec.label}: unexpected answers ${bad.join(", ")}`);
    if (Object.keys(row.monitor_mismatch).length > 0)
      problems.push(
        `feature cost, ${spec.label}: MONITOR and commandstats disagree ${JSON.stringify(row.monitor_mismatch)}`,
      );
  }
  return { rows, problems };
}

async function featureRow(
  ctx: { edge: EdgeStack; mf: Miniflare; tap: Tap; monitor: Monitor; ips: IpSource },
  spec: FeatureSpec,
  decisions: number,
): Promise<{ row: FeatureRow; bad: string[] }> {
  const { edge, mf, tap, monitor, ips } = ctx;
  // one uncounted client first: the route's overrides copy is in (see billed.ts' row())
  await runClient(mf, spec, ips.take());
  await sleep(150);
  const before = await commandStats(edge.resp);
  const tapBefore = tap.counts();
  await monitor.take();
  const perClient = spec.expect.filter((s) => s !== 403).length;
  const hits: Hit[] = [];
  const bad: string[] = [];
  for (let c = 0; c < Math.ceil(decisions / perClient); c++) {
    const got = await runClient(mf, spec, ips.take());
    got.forEach((h, i) => h.status !== spec.expect[i] && bad.push(`#${i + 1}: ${h.status} ${h.decision}`));
    hits.push(...got);
  }
  await sleep(200); // what the last requests deferred (waitUntil) reaches Redis
  const calls = await monitor.take();
  const delta = statsDelta(before, await commandStats(edge.resp));
  const byKind = tapDelta(tapBefore, tap.counts()).byKind;
  const n = hits.filter((h) => h.status !== 403).length;
  const sides = splitCalls(calls, byKind, n);
  const row: FeatureRow = {
    key: spec.key,
    label: spec.label,
    requests: hits.length,
    decisions: n,
    outcomes: outcomesOf(hits),
    ...sides,
    refusals: hits.filter((h) => h.status === 429 || h.decision === "diverted").length,
    degraded: hits.filter((h) => h.decision === "degraded").length,
    monitor_mismatch: mismatch(calls, delta),
  };
  return { row, bad: [...new Set(bad)] };
}

/** Per command name, MONITOR's count (calls and what scripts ran) against commandstats', where they differ. */
function mismatch(
  calls: MonitoredCall[],
  delta: Record<string, { calls: number }>,
): Record<string, { monitor: number; commandstats: number }> {
  const seen: Record<string, number> = {};
  for (const c of calls) for (const name of [c.command, ...c.inner]) seen[name] = (seen[name] ?? 0) + 1;
  const out: Record<string, { monitor: number; commandstats: number }> = {};
  for (const name of new Set([...Object.keys(seen), ...Object.keys(delta)])) {
    if (name === "info" || name === "echo") continue;
    const monitor = seen[name] ?? 0;
    const commandstats = delta[name]?.calls ?? 0;
    if (monitor !== commandstats) out[name] = { monitor, commandstats };
  }
  return out;
}

async function runClient(mf: Miniflare, spec: FeatureSpec, ip: string): Promise<Hit[]> {
  const out: Hit[] = [];
  for (let i = 0; i < spec.expect.length; i++) {
    if (spec.pauseBeforeLast && i === spec.expect.length - 1) await sleep(spec.pauseBeforeLast);
    out.push(await hit(mf, spec.path, ip, FROM_EU));
  }
  return out;
}

type Side = "request_path" | "background" | "routine";

/**
 * Script calls in take/peek mode are the request path; release, settle and refund, and a ban's
 * commands, the background; leases (lease, return: another route's, closing) are routine.
 */
function sideOfCall(c: MonitoredCall): Side {
  if (SCRIPTS.has(c.command)) return sideOfKind(modeOfArgs(c.args));
  const key = c.args[0] ?? "";
  if (/:(refusals|ban):/.test(key) || (/:lists$/.test(key) && c.command !== "hgetall")) return "background";
  return "routine";
}

/** The same split for the tap's kinds: a mode, or a plain request's commands joined by `+`. */
function sideOfKind(kind: string): Side {
  if (PATH_MODES.has(kind)) return "request_path";
  if (BACKGROUND_MODES.has(kind)) return "background";
  if (kind === "lease" || kind === "return" || kind === "?") return "routine";
  return kind.split("+").some((c) => c === "incr" || c === "hget" || c === "hset") ? "background" : "routine";
}

const SCRIPTS = new Set(["evalsha", "eval", "evalsha_ro", "eval_ro"]);
const PATH_MODES = new Set(["take", "peek"]);
const BACKGROUND_MODES = new Set(["refund", "release", "settle"]);

/** EVALSHA sha numkeys key... mode ...: decide.lua's ARGV[1]. */
function modeOfArgs(args: string[]): string {
  const n = Number(args[1]);
  return Number.isInteger(n) && n >= 0 ? (args[2 + n] ?? "?") : "?";
}

function splitCalls(
  calls: MonitoredCall[],
  byKind: Record<string, number>,
  n: number,
): Pick<FeatureRow, "request_path" | "background" | "routine"> {
  const commands: Record<Side, Record<string, number>> = { request_path: {}, background: {}, routine: {} };
  const kinds: Record<Side, Record<string, number>> = { request_path: {}, background: {}, routine: {} };
  for (const c of calls) {
    const into = commands[sideOfCall(c)];
    for (const name of [c.command, ...c.inner]) into[name] = (into[name] ?? 0) + 1;
  }
  for (const [kind, count] of Object.entries(byKind)) kinds[sideOfKind(kind)][kind] = count;
  const side = (s: Side): CostSide => {
    const total = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);
    return {
      http_per_decision: round(total(kinds[s]) / n),
      billed_per_decision: round(total(commands[s]) / n),
      by_command: Object.fromEntries(Object.entries(commands[s]).map(([c, k]) => [c, round(k / n)])),
      http_by_kind: kinds[s],
    };
  };
  return {
    request_path: side("request_path"),
    background: side("background"),
    routine: { http_by_kind: kinds.routine, commands: commands.routine },
  };
}
