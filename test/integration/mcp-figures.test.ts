import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { McpRouteRow, McpToolRow } from "../../src/admin/dashboard-data.js";
import type { SluiceInput } from "../../src/config/schema.js";
import { startMcpOrigin, type McpOrigin } from "../support/mcp-server.js";
import { call, sleep, useStack } from "./stack.js";

/**
 * The dashboard's MCP tools panel end to end: the official SDK as client and server, sluice in
 * workerd between them, a real Redis. Guarded calls repeated, one whose tool answers `isError`,
 * a passed tool: `mcp[]` of `GET /__sluice/api/dashboard` says per tool what was sent, and the
 * first runs' histogram counts each first run once its answer is known (the failed one too).
 */
const ADMIN = "mcp-figures-admin-token-0123456789";
const SLUICE: SluiceInput = {
  key_prefix: "mcpfig",
  timeout_ms: 5_000, // about what happens to calls, not latency
  routes: [{ name: "figs", match: "/json-mcp", methods: ["GET", "POST", "DELETE"], mcp: { pass: ["search"] } }],
};

let origin: McpOrigin;
const rig = useStack({
  sluice: SLUICE,
  listen: true,
  bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
  origin: async () => {
    origin = await startMcpOrigin();
    return origin;
  },
});
let client: Client;
beforeAll(async () => {
  const base = await (rig.mf as Miniflare).ready;
  client = new Client({ name: "agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL("/json-mcp", base)));
});
afterAll(async () => {
  await client?.close();
});

const admin = { authorization: `Bearer ${ADMIN}` };

/** The route's tools on the dashboard once `firstRuns` first runs are counted (recorded after the responses). */
async function toolsOnce(firstRuns: number): Promise<McpToolRow[]> {
  let tools: McpToolRow[] = [];
  for (let i = 0; i < 100; i++) {
    await call(rig.mf, "/__sluice/metrics", { headers: admin }); // flushes the isolate's counts
    const data = (await call(rig.mf, "/__sluice/api/dashboard", { headers: admin })).json() as {
      mcp: McpRouteRow[];
    };
    tools = data.mcp.find((r) => r.route === "figs")?.tools ?? [];
    if (tools.reduce((n, t) => n + t.first_runs, 0) >= firstRuns) break;
    await sleep(50);
  }
  return tools;
}

describe("the dashboard's MCP tools panel", () => {
  it("gives per tool the repeats suppressed, the replay share and the first runs, a failed one among them", async () => {
    const order = { sku: "fig-1", qty: 1 };
    for (let i = 0; i < 3; i++) await client.callTool({ name: "create_order", arguments: order });
    const refund = { order: "fig-9" };
    const refunds = [];
    for (let i = 0; i < 2; i++) refunds.push(await client.callTool({ name: "refund", arguments: refund }));
    expect(refunds.map((r) => r.isError)).toEqual([true, true]);
    for (let i = 0; i < 2; i++) await client.callTool({ name: "search", arguments: { q: "x" } });
    expect(origin.runs("create_order", order)).toBe(1);
    expect(origin.runs("refund", refund)).toBe(1);

    const tools = await toolsOnce(2);
    const of = (name: string) => tools.find((t) => t.tool === name);
    expect(tools.map((t) => t.tool)).toEqual(["create_order", "refund", "search"]);
    expect(of("create_order")).toMatchObject({
      guarded: 3,
      suppression_rate: 0.667, // 2 of 3 answered without a run
      first_runs: 1,
      first_failures: 0,
    });
    const o = of("create_order")!.outcomes;
    expect([o.first, o.replay + o.joined]).toEqual([1, 2]);
    expect(of("create_order")!.first_p50_ms).toEqual(expect.any(Number));
    // the tool ran and said it failed: its first run counts as failed, its repeat was still suppressed
    expect(of("refund")).toMatchObject({ guarded: 2, suppression_rate: 0.5, first_runs: 1, first_failures: 1 });
    // a pass tool: every call ran, none guarded, no first runs
    expect(of("search")).toMatchObject({ guarded: 0, suppression_rate: null, replay_share: null, first_runs: 0 });
    expect(of("search")!.outcomes.passed).toBe(2);
  });
});
