/**
 * The MCP per-tool first-run figures on their own: the fields a first run leaves, how the claim
 * wrapper judges a run (a result, an `isError` result, a JSON-RPC error, no answer, abandoned),
 * that it records once and leaves the stored answer whole for the claim, and that the readers of
 * the outcome counts and of the first runs each keep to their own fields.
 */
import { describe, expect, it } from "vitest";
import { mcpFigures, mcpFirstRuns, observeMcpFirstRun, observedFirstRun } from "./mcp.js";

/** A metrics buffer that only counts fields. */
function counter() {
  const fields: Record<string, number> = {};
  return { fields, countField: (f: string, n = 1) => void (fields[f] = (fields[f] ?? 0) + n) };
}

/** A claim that keeps what it was settled with (the body it read) or that it was abandoned. */
function claim() {
  const seen: { body?: string; abandoned?: string } = {};
  return {
    seen,
    sluiceHeaders: { "sluice-fencing-token": "7" },
    settleWith: async (o: { reply: { outcome: string; response: Response } }) => {
      seen.body = await o.reply.response.text();
      return new Response(seen.body);
    },
    abandon: async (reason: string) => void (seen.abandoned = reason),
  };
}

const answered = (body: unknown, status = 200) => ({
  reply: { outcome: "answered", response: new Response(JSON.stringify(body), { status }) },
});
const runs = (fields: Record<string, number>) => mcpFirstRuns([fields]).get("shop")?.get("create_order");

describe("a guarded call's first run", () => {
  it("leaves its latency bucket, its count and its failure under the route and tool", () => {
    const m = counter();
    observeMcpFirstRun(m, "shop", "create_order", 3, false); // bucket 7
    observeMcpFirstRun(m, "shop", "create_order", 1_500, true); // bucket 43
    expect(m.fields).toEqual({
      "mcp_latency:shop|7:create_order": 1,
      "mcp_latency:shop|43:create_order": 1,
      "mcp_first:shop|count:create_order": 2,
      "mcp_first:shop|failed:create_order": 1,
    });
    expect(runs(m.fields)).toEqual({
      latency: new Map([
        [7, 1],
        [43, 1],
      ]),
      count: 2,
      failed: 1,
    });
    // the outcome counts' reader passes over them, and the first runs' reader over the outcomes
    expect(
      mcpFigures([{ ...m.fields, "mcp:shop|first:create_order": 2 }])
        .get("shop")
        ?.get("create_order")?.first,
    ).toBe(2);
    expect(mcpFigures([m.fields]).size).toBe(0);
    expect(mcpFirstRuns([{ "mcp:shop|first:create_order": 2, "mcp_first:shop|bogus:x": 1 }]).size).toBe(0);
  });

  it.each([
    ["a result", answered({ jsonrpc: "2.0", id: 1, result: { content: [] } }), false],
    ["an isError result", answered({ jsonrpc: "2.0", id: 1, result: { isError: true, content: [] } }), true],
    ["a JSON-RPC error", answered({ jsonrpc: "2.0", id: 1, error: { code: -32603, message: "x" } }), true],
    ["a 5xx", answered({}, 503), true],
    ["a timeout", { reply: { outcome: "timeout", response: new Response(null, { status: 504 }) } }, true],
    ["a broken answer", { reply: { outcome: "broken", response: new Response(null, { status: 502 }) } }, true],
  ])("settled with %s: failed is %s, the claim still reads the whole answer", async (_, outcome, failed) => {
    const m = counter();
    const inner = claim();
    const held = observedFirstRun(inner, m, "shop", "create_order");
    const body = await outcome.reply.response.clone().text();
    await held.settleWith(outcome);
    expect(inner.seen.body).toBe(body);
    expect(held.sluiceHeaders).toEqual(inner.sluiceHeaders); // the rest of the claim as it was
    expect(runs(m.fields)).toMatchObject({ count: 1, failed: failed ? 1 : 0 });
  });

  it("abandoned (a JSON-RPC error, the message refused, sluice stopping it): failed, and counted once", async () => {
    const m = counter();
    const inner = claim();
    const held = observedFirstRun(inner, m, "shop", "create_order");
    await held.abandon("a JSON-RPC error: the tool did not run");
    await held.settleWith(answered({ jsonrpc: "2.0", id: 1, result: {} }));
    expect(inner.seen.abandoned).toBe("a JSON-RPC error: the tool did not run");
    expect(runs(m.fields)).toMatchObject({ count: 1, failed: 1 });
  });
});
