/**
 * Redis requests per decision: how many HTTP requests reach the Upstash-REST bridge, and how
 * many top-level script calls reach Redis, for each allowed request. The design target is
 * exactly one of each (one EVALSHA of lua/decide.lua decides every limit of the route).
 */
import type { Miniflare } from "miniflare";
import { LIMITED, PATH_FOUR, PATH_ONE } from "./config.js";
import { hit, Outcomes } from "./request.js";
import { type BenchStack, type CommandStat, commandStats, statsDelta } from "./stack.js";
import { type IpSource, round } from "./stats.js";

/** Commands decide.lua runs inside the script (commandstats counts these too). */
const INSIDE_SCRIPT = ["time", "get", "set"] as const;
/** Top-level script commands, as a client sends them. */
const SCRIPT_CALLS = ["evalsha", "eval", "evalsha_ro", "eval_ro"] as const;

export interface DecisionCounts {
  label: string;
  path: string;
  limits: number;
  decisions: number;
  /** HTTP requests the bridge received (every one is one Upstash REST call). */
  http_requests: number;
  http_requests_per_decision: number;
  /** Top-level EVALSHA/EVAL (and their _RO forms) reaching Redis. */
  script_calls: Record<string, number>;
  script_calls_per_decision: number;
  /** TIME / GET / SET run by decide.lua itself, per decision. */
  inside_script_per_decision: Record<string, number>;
  inside_script_total_per_decision: number;
  /** Any other command that moved in commandstats while measuring (should be empty). */
  other_commands: Record<string, number>;
  /** Commands whose failed_calls or rejected_calls moved (e.g. an EVALSHA answered NOSCRIPT). */
  failed_commands: Record<string, number>;
  /** Requests the origin received: an allowed request is forwarded exactly once. */
  origin_requests: number;
  unexpected_outcomes: Record<string, number>;
}

export interface DecisionResult {
  /** The first decision of a fresh isolate against a Redis that has never seen the script (NOSCRIPT, then EVAL). */
  cold: DecisionCounts;
  routes: DecisionCounts[];
}

export async function measureDecisions(stack: BenchStack, ips: IpSource, n: number): Promise<DecisionResult> {
  const mf = await stack.worker(LIMITED);
  const cold = await count(stack, mf, ips, { label: "cold: first decision, script not in Redis yet", path: PATH_ONE, limits: limitsOf("one") }, 1);
  const routes = [
    await count(stack, mf, ips, { label: "route with 1 limit", path: PATH_ONE, limits: limitsOf("one") }, n),
    await count(stack, mf, ips, { label: "route with 4 limits", path: PATH_FOUR, limits: limitsOf("four") }, n),
  ];
  return { cold, routes };
}

function limitsOf(route: string): number {
  const limits = LIMITED.routes?.find((r) => r.name === route)?.limits;
  if (!limits) throw new Error(`bench config has no route "${route}"`);
  return limits.length;
}

async function count(
  stack: BenchStack,
  mf: Miniflare,
  ips: IpSource,
  what: { label: string; path: string; limits: number },
  n: number,
): Promise<DecisionCounts> {
  const outcomes = new Outcomes("allow");
  const before = await commandStats(stack.resp);
  const httpBefore = stack.bridge.requests;
  const originBefore = stack.origin.seen.length;
  for (let i = 0; i < n; i++) outcomes.record(await hit(mf, what.path, ips.take()));
  const httpAfter = stack.bridge.requests;
  const originAfter = stack.origin.seen.length;
  const delta = statsDelta(before, await commandStats(stack.resp));
  delete delta.info; // our own INFO commandstats

  const calls = (name: string): number => delta[name]?.calls ?? 0;
  const scriptCalls = Object.fromEntries(SCRIPT_CALLS.map((c) => [c, calls(c)]).filter(([, v]) => v !== 0));
  const scriptTotal = SCRIPT_CALLS.reduce((sum, c) => sum + calls(c), 0);
  const inside = Object.fromEntries(INSIDE_SCRIPT.map((c) => [c, round(calls(c) / n)]));
  const known = new Set<string>([...INSIDE_SCRIPT, ...SCRIPT_CALLS]);
  const other = Object.fromEntries(
    Object.entries(delta)
      .filter(([name, s]) => !known.has(name) && s.calls !== 0)
      .map(([name, s]) => [name, s.calls]),
  );
  const failed = Object.fromEntries(
    Object.entries(delta)
      .map(([name, s]): [string, number] => [name, failures(s)])
      .filter(([, v]) => v !== 0),
  );
  return {
    label: what.label,
    path: what.path,
    limits: what.limits,
    decisions: n,
    http_requests: httpAfter - httpBefore,
    http_requests_per_decision: round((httpAfter - httpBefore) / n),
    script_calls: scriptCalls,
    script_calls_per_decision: round(scriptTotal / n),
    inside_script_per_decision: inside,
    inside_script_total_per_decision: round(INSIDE_SCRIPT.reduce((sum, c) => sum + calls(c), 0) / n),
    other_commands: other,
    failed_commands: failed,
    origin_requests: originAfter - originBefore,
    unexpected_outcomes: outcomes.unexpected,
  };
}

function failures(s: CommandStat): number {
  return s.failed_calls + s.rejected_calls;
}
