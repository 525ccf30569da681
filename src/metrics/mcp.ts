/*
 * The MCP gateway's figures (docs/mcp.md, Figures): what happened to each `tools/call`, per route
 * and tool. Kept in the same per-minute and all-time hashes as the decisions, under fields of two
 * parts (`mcp:{route}|{outcome}:{tool}`), so the readers of `route|limit|decision` pass over them;
 * a tool's label never holds a colon or a bar (src/features/mcp/isolate.ts).
 */
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

/** Every route's and tool's counts in `hashes` (summed): route → tool → outcome → n. */
export function mcpFigures(
  hashes: ReadonlyArray<Record<string, string | number>>,
): Map<string, Map<string, Record<McpOutcome, number>>> {
  const routes = new Map<string, Map<string, Record<McpOutcome, number>>>();
  for (const hash of hashes)
    for (const [field, value] of Object.entries(hash)) {
      if (!field.startsWith(MCP_FIELD)) continue;
      const bar = field.indexOf("|");
      const colon = field.indexOf(":", bar);
      const outcome = field.slice(bar + 1, colon) as McpOutcome;
      if (bar < 0 || colon < 0 || !MCP_OUTCOMES.includes(outcome)) continue;
      const route = field.slice(MCP_FIELD.length, bar);
      const tools = routes.get(route) ?? new Map<string, Record<McpOutcome, number>>();
      routes.set(route, tools);
      const tool = field.slice(colon + 1);
      const counts =
        tools.get(tool) ?? (Object.fromEntries(MCP_OUTCOMES.map((o) => [o, 0])) as Record<McpOutcome, number>);
      tools.set(tool, counts);
      counts[outcome] += Number(value) || 0;
    }
  return routes;
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
