/*
 * The dashboard's MCP figures per route and tool (docs/mcp.md, Figures; docs/operating.md: "How
 * each panel is computed"), from the hour's per-minute metrics hashes dashboardData has already
 * read, as src/admin/idempotency-figures.ts does for idempotent routes.
 */
import type { Config } from "../config/index.js";
import { mcpFigures, mcpFirstRuns, MCP_OUTCOMES, type McpFirstRuns, type McpOutcome } from "../metrics/mcp.js";
import type { McpRouteRow, McpToolRow } from "./dashboard-data.js";
import { quantile } from "./figures.js";

/** The figures of every route with an `mcp` table over `hour` (in configuration order), a row per tool counted. */
export function mcpRows(config: Config, hour: ReadonlyArray<Record<string, string | number>>): McpRouteRow[] {
  const calls = mcpFigures(hour);
  const runs = mcpFirstRuns(hour);
  return config.routes
    .filter((r) => r.mcp)
    .map((r) => {
      const byTool = calls.get(r.name) ?? new Map<string, Record<McpOutcome, number>>();
      const runsByTool = runs.get(r.name) ?? new Map<string, McpFirstRuns>();
      const tools = [...new Set([...byTool.keys(), ...runsByTool.keys()])].sort((a, b) => a.localeCompare(b));
      return { route: r.name, tools: tools.map((t) => toolRow(t, byTool.get(t), runsByTool.get(t))) };
    });
}

/** One tool's row: its outcomes, the shares of its guarded calls, its first runs. */
export function toolRow(
  tool: string,
  counted: Record<McpOutcome, number> | undefined,
  runs: McpFirstRuns | undefined,
): McpToolRow {
  const o = counted ?? (Object.fromEntries(MCP_OUTCOMES.map((x) => [x, 0])) as Record<McpOutcome, number>);
  const guarded = o.first + o.replay + o.joined + o.indeterminate + o.mismatch;
  const latency = runs?.latency ?? new Map<number, number>();
  return {
    tool,
    outcomes: { ...o },
    guarded,
    suppression_rate: guarded ? round((o.replay + o.joined) / guarded) : null,
    replay_share: guarded ? round(o.replay / guarded) : null,
    first_runs: runs?.count ?? 0,
    first_failures: runs?.failed ?? 0,
    first_p50_ms: quantile(latency, 0.5),
    first_p99_ms: quantile(latency, 0.99),
  };
}

const round = (x: number) => Math.round(x * 1000) / 1000;
