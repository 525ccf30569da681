/*
 * The MCP gateway's figures (docs/mcp.md, Figures): what happened to each `tools/call`, per route
 * and tool, and how each guarded call's first run went (its latency, whether it failed). Kept in
 * the same per-minute and all-time hashes as the decisions, under fields of two parts
 * (`mcp:{route}|{outcome}:{tool}`, `mcp_latency:{route}|{bucket}:{tool}`,
 * `mcp_first:{route}|count:{tool}` and `|failed:{tool}`), so the readers of `route|limit|decision`
 * pass over them; a tool's label never holds a colon or a bar (src/features/mcp/isolate.ts).
 */
import { latencyBucket } from "./histogram.js";
import type { FieldCounter } from "./idempotency.js";

/**
 * `first`: a guarded call went to the server. `replay`: a repeat answered with the stored result.
 * `joined`: a repeat of a call in flight that waited for its result. `refused`: a call refused
 * (a limit, the replay bound, still running past `wait`, the store). `passed`: a call not guarded,
 * forwarded. `indeterminate`: a guarded call whose outcome is unknown, and each repeat answered so.
 * `mismatch`: an explicit key reused with other arguments.
 */
export const MCP_OUTCOMES = ["first", "replay", "joined", "refused", "passed", "indeterminate", "mismatch"] as const;

export type McpOutcome = (typeof MCP_OUTCOMES)[number];

const MCP_FIELD = "mcp:";

/** Counts one call of `tool` (its label) on `route`. */
export function countMcpCall(metrics: FieldCounter, route: string, tool: string, outcome: McpOutcome): void {
  metrics.countField(`${MCP_FIELD}${route}|${outcome}:${tool}`);
}

const MCP_LATENCY_FIELD = "mcp_latency:";
const MCP_FIRST_FIELD = "mcp_first:";

/** One field of a per-tool figure (`{prefix}{route}|{what}:{tool}`), read back. */
interface ToolField {
  route: string;
  what: string;
  tool: string;
  n: number;
}

/** The fields of `hashes` under `prefix`, split into route, what was counted and tool. */
function* toolFields(hashes: ReadonlyArray<Record<string, string | number>>, prefix: string): Generator<ToolField> {
  for (const hash of hashes)
    for (const [field, value] of Object.entries(hash)) {
      if (!field.startsWith(prefix)) continue;
      const bar = field.indexOf("|");
      const colon = bar < 0 ? -1 : field.indexOf(":", bar);
      if (colon < 0) continue;
      const n = Number(value);
      const what = field.slice(bar + 1, colon);
      yield {
        route: field.slice(prefix.length, bar),
        what,
        tool: field.slice(colon + 1),
        n: Number.isFinite(n) ? n : 0,
      };
    }
}

/** `routes`' entry for `route` and `tool`, made with `empty` the first time. */
function toolEntry<T>(routes: Map<string, Map<string, T>>, f: ToolField, empty: () => T): T {
  const tools = routes.get(f.route) ?? new Map<string, T>();
  routes.set(f.route, tools);
  const entry = tools.get(f.tool) ?? empty();
  tools.set(f.tool, entry);
  return entry;
}

const noOutcomes = () => Object.fromEntries(MCP_OUTCOMES.map((o) => [o, 0])) as Record<McpOutcome, number>;

/** Every route's and tool's counts in `hashes` (summed): route → tool → outcome → n. */
export function mcpFigures(
  hashes: ReadonlyArray<Record<string, string | number>>,
): Map<string, Map<string, Record<McpOutcome, number>>> {
  const routes = new Map<string, Map<string, Record<McpOutcome, number>>>();
  for (const f of toolFields(hashes, MCP_FIELD)) {
    if (!MCP_OUTCOMES.includes(f.what as McpOutcome)) continue;
    toolEntry(routes, f, noOutcomes)[f.what as McpOutcome] += f.n;
  }
  return routes;
}

/** A tool's first runs read back: latency bucket → runs (src/metrics/histogram.ts), the runs, those that failed. */
export interface McpFirstRuns {
  latency: Map<number, number>;
  count: number;
  failed: number;
}

/** Every route's and tool's first runs in `hashes` (summed): route → tool → first runs. */
export function mcpFirstRuns(
  hashes: ReadonlyArray<Record<string, string | number>>,
): Map<string, Map<string, McpFirstRuns>> {
  const routes = new Map<string, Map<string, McpFirstRuns>>();
  const empty = (): McpFirstRuns => ({ latency: new Map(), count: 0, failed: 0 });
  for (const f of toolFields(hashes, MCP_LATENCY_FIELD)) {
    const bucket = Number(f.what);
    if (!Number.isInteger(bucket) || f.what === "") continue;
    const latency = toolEntry(routes, f, empty).latency;
    latency.set(bucket, (latency.get(bucket) ?? 0) + f.n);
  }
  for (const f of toolFields(hashes, MCP_FIRST_FIELD))
    if (f.what === "count" || f.what === "failed") toolEntry(routes, f, empty)[f.what] += f.n;
  return routes;
}

/**
 * Records a guarded call's first run once its answer is known: the time from sending it to the
 * answer in the tool's histogram, and whether it failed (a JSON-RPC error or an `isError` result,
 * a refusal of the message or a 5xx, no answer at all: the outcome unknown).
 */
export function observeMcpFirstRun(
  metrics: FieldCounter,
  route: string,
  tool: string,
  latencyMs: number,
  failed: boolean,
): void {
  const ms = Math.max(0, latencyMs);
  metrics.countField(`${MCP_LATENCY_FIELD}${route}|${latencyBucket(ms)}:${tool}`);
  metrics.countField(`${MCP_FIRST_FIELD}${route}|count:${tool}`);
  if (failed) metrics.countField(`${MCP_FIRST_FIELD}${route}|failed:${tool}`);
}

/** What a first run's claim is settled with (src/features/guard/core.ts `CallOutcome`), as far as the figures read it. */
interface FirstRunOutcome {
  reply: { outcome: string; response: Response };
}

/** A first run's claim (src/features/guard/core.ts `Claim`): settled with the server's reply, or abandoned. */
interface FirstRunClaim {
  settleWith(outcome: FirstRunOutcome): Promise<Response>;
  abandon(reason: string): Promise<void>;
}

/**
 * `claim`, observed: the first of its settling or its abandoning records the first run
 * (`observeMcpFirstRun`), timed from now (the call is about to be sent). Settled with a 2xx
 * answer, the stored JSON-RPC response is read from a copy: a result with `isError: true` (or an
 * `error`) is a failed run; any other reply (a 5xx, a timeout, a broken connection, the server
 * unreachable) failed, and so did a run abandoned (a JSON-RPC error, the message refused, sluice
 * stopping the call).
 */
export function observedFirstRun<C extends FirstRunClaim>(
  claim: C,
  metrics: FieldCounter,
  route: string,
  tool: string,
): C {
  const started = Date.now();
  let observed = false;
  const observe = (failed: boolean) => {
    if (observed) return;
    observed = true;
    observeMcpFirstRun(metrics, route, tool, Date.now() - started, failed);
  };
  return {
    ...claim,
    settleWith: async (outcome: FirstRunOutcome) => {
      const { reply } = outcome;
      const ok = reply.outcome === "answered" && reply.response.status >= 200 && reply.response.status < 300;
      observe(ok ? await answerFailed(reply.response.clone()) : true);
      return claim.settleWith(outcome);
    },
    abandon: async (reason: string) => {
      observe(true);
      return claim.abandon(reason);
    },
  };
}

/** Whether a stored JSON-RPC response says the run failed: an `error`, a result with `isError: true`, or nothing readable. */
async function answerFailed(response: Response): Promise<boolean> {
  try {
    const message = (await response.json()) as { error?: unknown; result?: { isError?: unknown } } | null;
    return !message || message.error !== undefined || message.result?.isError === true;
  } catch {
    return true;
  }
}

/** `sluice_mcp_calls_total{route,tool,outcome}` from the all-time counts. */
export function mcpLines(total: Record<string, string | number>, esc: (v: string | undefined) => string): string[] {
  const lines = [
    "# HELP sluice_mcp_calls_total MCP tools/call requests by route, tool and outcome.",
    "# TYPE sluice_mcp_calls_total counter",
  ];
  const routes = [...mcpFigures([total])].sort(([a], [b]) => a.localeCompare(b));
  for (const [route, tools] of routes)
    for (const [tool, counts] of [...tools].sort(([a], [b]) => a.localeCompare(b)))
      for (const outcome of MCP_OUTCOMES)
        lines.push(
          `sluice_mcp_calls_total{route="${esc(route)}",tool="${esc(tool)}",outcome="${outcome}"} ${counts[outcome]}`,
        );
  return lines;
}
