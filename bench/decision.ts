/**
 * Redis requests per decision: how many HTTP requests reach the Upstash-REST bridge, and how
 * many top-level script calls reach Redis, for each allowed request. The design target is
 * exactly one of each (one EVALSHA of lua/decide.lua decides every limit of the route).
 * The Worker talks to the bridge through a tap (`tap.ts`) that sorts its HTTP requests into
 * decision requests (carrying the script call) and the Worker's other, batched background ones
 * (metrics flush, deny/allow lists refresh, the route's overrides refresh), which are reported separately.
 */
import type { Miniflare } from "miniflare";
import { LIMITED, PATH_ALGORITHMS, PATH_FOUR, PATH_ONE } from "./config.js";
import { hit, Outcomes } from "./request.js";
import { type BenchStack, type Cleanup, type CommandStat, commandStats, statsDelta } from "./stack.js";
import { type IpSource, round } from "./stats.js";
import { startTap, type Tap, type TapCounts, tapDelta } from "./tap.js";

/**
 * Commands decide.lua may run inside the script (commandstats counts these too): TIME, one MGET
 * of every bucket and SET per bucket on every allowed decision; HMGET of the route's overrides
 * when the isolate has no trusted copy of them; DEL when a bucket is back to its initial state;
 * INCRBY and PEXPIRE for split demand. GET only from an older decide.lua (one per limit).
 */
const INSIDE_SCRIPT = ["time", "mget", "get", "set", "del", "incrby", "pexpire", "hmget"] as const;
/** Top-level script commands, as a client sends them. */
const SCRIPT_CALLS = ["evalsha", "eval", "evalsha_ro", "eval_ro"] as const;

export interface DecisionCounts {
  label: string;
  path: string;
  limits: number;
  decisions: number;
  /** HTTP requests the bridge received (every one is one Upstash REST call). */
  http_requests: number;
  /** Of those, the ones carrying the script call (the tap's count), per decision: the target is 1. */
  decision_http_requests: number;
  http_requests_per_decision: number;
  /** The rest: the Worker's batched background work (metrics flush, lists and overrides refresh), and what they carried. */
  other_http_requests: number;
  other_http_commands: Record<string, number>;
  /** The most `other_http_requests` may be: each background task at most once per 5 s per isolate, plus its first run. */
  other_http_allowed: number;
  elapsed_s: number;
  /** Requests the tap could not read as Upstash REST (should be 0). */
  unreadable_http_requests: number;
  /** Top-level EVALSHA/EVAL (and their _RO forms) reaching Redis. */
  script_calls: Record<string, number>;
  script_calls_per_decision: number;
  /** TIME / GET / SET (and DEL / INCRBY / PEXPIRE when they occurred) run by decide.lua itself, per decision. */
  inside_script_per_decision: Record<string, number>;
  inside_script_total_per_decision: number;
  /** Any other command that moved in commandstats, and came neither from the script nor from a background request (should be empty). */
  other_commands: Record<string, number>;
  /** Commands whose failed_calls or rejected_calls moved (e.g. an EVALSHA answered NOSCRIPT). */
  failed_commands: Record<string, number>;
  /** Requests the origin received: an allowed request is forwarded exactly once. */
  origin_requests: number;
  unexpected_outcomes: Record<string, number>;
}

export interface DecisionResult {
  /** The first decision of a fresh isolate against a Redis that has never seen the script (one EVAL: a cold isolate sends the body). */
  cold: DecisionCounts;
  routes: DecisionCounts[];
}

/** Each of the Worker's background tasks (metrics flush, lists refresh) runs at most this often per isolate. */
const BACKGROUND_EVERY_S = 5;
const BACKGROUND_TASKS = 2;
/** The copy of the measured route's overrides is refreshed at most this often per isolate (src/features/rate-limit/decision/overrides.ts). */
const OVERRIDES_EVERY_S = 0.8;

export async function measureDecisions(
  stack: BenchStack,
  cleanup: Cleanup,
  ips: IpSource,
  n: number,
): Promise<DecisionResult> {
  const tap = await startTap(stack.bridge.url, cleanup, "section 1");
  const mf = await stack.worker(LIMITED, { UPSTASH_REDIS_REST_URL: tap.url });
  const cold = await count(
    stack,
    tap,
    mf,
    ips,
    { label: "cold: first decision, script not in Redis yet", path: PATH_ONE, limits: limitsOf("one") },
    1,
  );
  const routes = [
    await count(stack, tap, mf, ips, { label: "route with 1 limit", path: PATH_ONE, limits: limitsOf("one") }, n),
    await count(stack, tap, mf, ips, { label: "route with 4 limits", path: PATH_FOUR, limits: limitsOf("four") }, n),
    await count(
      stack,
      tap,
      mf,
      ips,
      { label: "route with 4 algorithms", path: PATH_ALGORITHMS, limits: limitsOf("algorithms") },
      n,
    ),
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
  tap: Tap,
  mf: Miniflare,
  ips: IpSource,
  what: { label: string; path: string; limits: number },
  n: number,
): Promise<DecisionCounts> {
  const outcomes = new Outcomes("allow");
  const before = await commandStats(stack.resp);
  const httpBefore = stack.bridge.requests;
  const tapBefore = tap.counts();
  const originBefore = stack.origin.seen.length;
  const started = performance.now();
  for (let i = 0; i < n; i++) outcomes.record(await hit(mf, what.path, ips.take()));
  const elapsedS = (performance.now() - started) / 1000;
  // Background work is deferred (waitUntil): let what the last requests started reach the bridge.
  await new Promise((done) => setTimeout(done, 100));
  const httpAfter = stack.bridge.requests;
  const tapped = tapDelta(tapBefore, tap.counts());
  const originAfter = stack.origin.seen.length;
  const delta = statsDelta(before, await commandStats(stack.resp));
  delete delta.info; // our own INFO commandstats

  return {
    label: what.label,
    path: what.path,
    limits: what.limits,
    decisions: n,
    http_requests: httpAfter - httpBefore,
    decision_http_requests: tapped.decision,
    http_requests_per_decision: round(tapped.decision / n),
    other_http_requests: tapped.other,
    other_http_commands: tapped.otherCommands,
    other_http_allowed:
      BACKGROUND_TASKS * (Math.floor(elapsedS / BACKGROUND_EVERY_S) + 1) + Math.floor(elapsedS / OVERRIDES_EVERY_S) + 1,
    elapsed_s: round(elapsedS, 2),
    unreadable_http_requests: tapped.unreadable,
    ...commandFigures(delta, tapped, n),
    origin_requests: originAfter - originBefore,
    unexpected_outcomes: outcomes.unexpected,
  };
}

/** Redis's own counts of the commands, split into script calls, commands inside the script and the rest. */
function commandFigures(delta: ReturnType<typeof statsDelta>, tapped: TapCounts, n: number) {
  const calls = (name: string): number => delta[name]?.calls ?? 0;
  const scriptCalls = Object.fromEntries(SCRIPT_CALLS.map((c) => [c, calls(c)]).filter(([, v]) => v !== 0));
  const scriptTotal = SCRIPT_CALLS.reduce((sum, c) => sum + calls(c), 0);
  // TIME, GET and SET always (0 is a figure there); the rest only when they occurred
  const inside = Object.fromEntries(
    INSIDE_SCRIPT.map((c) => [c, round(calls(c) / n)]).filter(
      ([c, v]) => v !== 0 || c === "time" || c === "mget" || c === "set",
    ),
  );
  const known = new Set<string>([...INSIDE_SCRIPT, ...SCRIPT_CALLS, ...Object.keys(tapped.otherCommands)]);
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
    script_calls: scriptCalls,
    script_calls_per_decision: round(scriptTotal / n),
    inside_script_per_decision: inside,
    inside_script_total_per_decision: round(INSIDE_SCRIPT.reduce((sum, c) => sum + calls(c), 0) / n),
    other_commands: other,
    failed_commands: failed,
  };
}

function failures(s: CommandStat): number {
  return s.failed_calls + s.rejected_calls;
}
