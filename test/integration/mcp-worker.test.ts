import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Miniflare } from "miniflare";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { startMcpOrigin, type McpOrigin } from "../support/mcp-server.js";
import { useStack } from "./stack.js";

/**
 * The MCP gateway end to end: the official TypeScript SDK (v1, 1.32) as the agent's client and
 * as the tool server (node:http, loopback), sluice in workerd between them, a real Redis. No
 * v2 client package is installable here (the package lists hold `@modelcontextprotocol/sdk`
 * only): the 2026-07-28 form (no session, `Mcp-Method`/`Mcp-Name` headers) is sent as raw requests.
 * Slowness is a gate the test opens, never a sleep.
 */
const mcpRoute = (name: string, match: string, extra: Record<string, unknown> = {}) => ({
  name,
  match,
  methods: ["GET", "POST", "DELETE"],
  mcp: { pass: ["search", "quota_probe"], wait: "20s" },
  ...extra,
});
const SLUICE: SluiceInput = {
  key_prefix: "mcp",
  // about what happens to calls, not latency: a loaded machine must not turn claims into 503s
  timeout_ms: 5_000,
  routes: [
    mcpRoute("shop", "/mcp", {
      limits: [
        { name: "calls", key: "ip", rate: 1_000, period: "1m" },
        { name: "probes", key: ["ip", "tool"], tools: ["quota_probe"], rate: 1, period: "1h" },
      ],
    }),
    mcpRoute("shop-json", "/json-mcp"),
    mcpRoute("shop-stateless", "/stateless-mcp", { origin_timeout: "1s", mcp: { wait: "20s" } }),
    mcpRoute("shop-stateless-long", "/stateless-long-mcp"),
    mcpRoute("shop-trusting", "/trusting-json-mcp", { mcp: { trust_annotations: true } }),
  ],
};

let origin: McpOrigin;
const rig = useStack({
  sluice: SLUICE,
  listen: true,
  origin: async () => {
    origin = await startMcpOrigin();
    return origin;
  },
});
let base: URL;
beforeAll(async () => {
  base = await (rig.mf as Miniflare).ready;
});

const open: Client[] = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

/**
 * An SDK client connected through sluice to `path`; `cancels()` resolves once every
 * `notifications/cancelled` it has sent so far has been answered (by sluice or the server).
 */
async function agent(
  path: string,
): Promise<{ client: Client; transport: StreamableHTTPClientTransport; cancels: () => Promise<unknown> }> {
  const client = new Client({ name: "agent", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(path, base));
  const sent: Array<Promise<void>> = [];
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    const sending = send(message, options);
    if ("method" in message && message.method === "notifications/cancelled") sent.push(sending);
    return sending;
  };
  await client.connect(transport);
  open.push(client);
  return { client, transport, cancels: () => Promise.all(sent) };
}

const textOf = (r: unknown) => ((r as { content: Array<{ text: string }> }).content[0] as { text: string }).text;

/** A raw JSON-RPC POST through sluice (the 2026-07-28 form when given its headers). */
async function rawPost(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(new URL(path, base), {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2025-11-25",
      ...headers,
    },
    body: JSON.stringify(body),
  });
}

const callBody = (id: number | string, name: string, args: Record<string, unknown>) => ({
  jsonrpc: "2.0",
  id,
  method: "tools/call",
  params: { name, arguments: args },
});

describe("a guarded call repeated with new ids runs once", () => {
  it("from one session, a second session and without a session: one run, each reply its own id, sessions unchanged", async () => {
    const args = { sku: "sku-1", qty: 2 };
    const a = await agent("/json-mcp");
    const b = await agent("/json-mcp");
    const sessionA = a.transport.sessionId;
    const sessionB = b.transport.sessionId;
    expect(sessionA).toBeTruthy();
    expect(sessionB).not.toBe(sessionA);

    const first = await a.client.callTool({ name: "create_order", arguments: args });
    const again = await a.client.callTool({ name: "create_order", arguments: args });
    const other = await b.client.callTool({ name: "create_order", arguments: args });
    // the same text, run 1: the SDK matched each reply to its own pending id (a wrong id would hang it)
    expect(textOf(first)).toBe("order sku-1 x2 created (run 1)");
    expect(textOf(again)).toBe(textOf(first));
    expect(textOf(other)).toBe(textOf(first));
    expect(origin.runs("create_order", args)).toBe(1);
    expect(a.transport.sessionId).toBe(sessionA);
    expect(b.transport.sessionId).toBe(sessionB);

    // without a session (the 2026-07-28 way), a raw repeat: its own id, JSON, no session header
    const raw = await rawPost("/json-mcp", callBody("raw-7", "create_order", args), {
      "mcp-method": "tools/call",
      "mcp-name": "create_order",
    });
    expect(raw.status).toBe(200);
    expect(raw.headers.get("content-type")).toBe("application/json");
    expect(raw.headers.get("mcp-session-id")).toBeNull();
    const body = (await raw.json()) as { id: string; result: unknown };
    expect(body.id).toBe("raw-7");
    expect(textOf(body.result)).toBe("order sku-1 x2 created (run 1)");
    expect(origin.runs("create_order", args)).toBe(1);
  });

  it("other arguments are another call; the forwarded call carries its fencing token in _meta", async () => {
    const { client } = await agent("/json-mcp");
    const before = origin.fences.length;
    await client.callTool({ name: "create_order", arguments: { sku: "sku-2", qty: 1 } });
    await client.callTool({ name: "create_order", arguments: { sku: "sku-2", qty: 3 } });
    expect(origin.runs("create_order", { sku: "sku-2", qty: 1 })).toBe(1);
    expect(origin.runs("create_order", { sku: "sku-2", qty: 3 })).toBe(1);
    const fences = origin.fences.slice(before).map(Number);
    expect(fences).toHaveLength(2);
    expect(fences[1]).toBeGreaterThan(fences[0] as number);
    // the ledger's entries of a guarded call name its tool
    const ledger = JSON.stringify(await rig.redis.xrange("mcp:ledger", "-", "+"));
    expect(ledger).toContain('"tool","create_order"');
  });

  it("a result with isError is kept too: the tool ran", async () => {
    const { client } = await agent("/json-mcp");
    const one = await client.callTool({ name: "refund", arguments: { order: "o-9" } });
    const two = await client.callTool({ name: "refund", arguments: { order: "o-9" } });
    expect(one.isError).toBe(true);
    expect(two).toEqual(one);
    expect(origin.runs("refund", { order: "o-9" })).toBe(1);
  });

  it("an explicit key in _meta reused with other arguments is refused as a tool result", async () => {
    const { client } = await agent("/json-mcp");
    const meta = { "io.sluice/idempotency-key": "order-77" };
    await client.callTool({ name: "create_order", arguments: { sku: "k", qty: 1 }, _meta: meta });
    const reused = await client.callTool({ name: "create_order", arguments: { sku: "k", qty: 5 }, _meta: meta });
    expect(reused.isError).toBe(true);
    expect(textOf(reused)).toContain("Idempotency-Key reused");
    expect(origin.runs("create_order", { sku: "k", qty: 5 })).toBe(0);
  });
});

describe("event streams", () => {
  it("an SSE answer is stored as its final response and replayed as JSON", async () => {
    const args = { sku: "sse-1", qty: 1 };
    const { client } = await agent("/mcp");
    const first = await client.callTool({ name: "create_order", arguments: args });
    expect(textOf(first)).toBe("order sse-1 x1 created (run 1)");
    // the stored result lands after the response: a repeat meanwhile waits for it (joined)
    const raw = await rawPost("/mcp", callBody(41, "create_order", args));
    expect(raw.headers.get("content-type")).toBe("application/json");
    const body = (await raw.json()) as { id: number; result: unknown };
    expect(body).toEqual({ jsonrpc: "2.0", id: 41, result: first });
    expect(origin.runs("create_order", args)).toBe(1);
  });
});

describe("a slow call the client gives up on", () => {
  it("the client gives up and cancels; called again: one run, the second gets the result", async () => {
    const { client, cancels } = await agent("/mcp");
    const gate = origin.gate("s-1");
    // the SDK's timeout and an abort take one path (it sends notifications/cancelled and rejects);
    // the abort is the test's to time: once the server is inside the tool, whatever the machine's pace
    const giveUp = new AbortController();
    const first = client
      .callTool({ name: "slow", arguments: { ref: "s-1" } }, undefined, { signal: giveUp.signal })
      .then(
        () => "answered",
        (e: unknown) => e,
      );
    await gate.entered;
    giveUp.abort(new Error("the agent timed out"));
    expect(String(await first)).toContain("the agent timed out");
    // the cancel has been answered before the tool may finish: had it reached the server, the call's signal is aborted
    await cancels();
    const retry = client.callTool({ name: "slow", arguments: { ref: "s-1" } });
    gate.open();
    expect(textOf(await retry)).toBe("slow s-1 done");
    expect(origin.runs("slow", { ref: "s-1" })).toBe(1);
    // the client's notifications/cancelled never reached the server: it answered the call
    expect(origin.cancelled("s-1")).toBe(false);
  });

  it("past origin_timeout the outcome is unknown, the late answer is kept and replayed", async () => {
    const { client } = await agent("/stateless-mcp");
    const gate = origin.gate("s-2");
    const first = client.callTool({ name: "slow", arguments: { ref: "s-2" } });
    await gate.entered;
    const unknown = await first;
    expect(unknown.isError).toBe(true);
    expect(textOf(unknown)).toMatch(/did not answer .* in time/);
    expect((unknown._meta as Record<string, unknown>)["io.sluice/retry-after-ms"]).toBe(1000);
    gate.open();
    const again = await client.callTool({ name: "slow", arguments: { ref: "s-2" } });
    expect(textOf(again)).toBe("slow s-2 done");
    expect(origin.runs("slow", { ref: "s-2" })).toBe(1);
  });

  it("a client that closes its stream (the 2026-07-28 cancel) does not close the server's: the retry gets the result", async () => {
    const gate = origin.gate("s-3");
    const closing = new AbortController();
    const first = fetch(new URL("/stateless-long-mcp", base), {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: JSON.stringify(callBody(1, "slow", { ref: "s-3" })),
      signal: closing.signal,
    }).catch((e: unknown) => e);
    await gate.entered;
    closing.abort();
    expect(await first).toBeInstanceOf(Error);
    const retry = rawPost("/stateless-long-mcp", callBody(2, "slow", { ref: "s-3" }));
    gate.open();
    const body = (await (await retry).json()) as { id: number; result: unknown };
    expect(body.id).toBe(2);
    expect(textOf(body.result)).toBe("slow s-3 done");
    expect(origin.runs("slow", { ref: "s-3" })).toBe(1);
  });

  it("a connection broken after the call was sent: unknown, and the repeat is refused, not run", async () => {
    const { client } = await agent("/json-mcp");
    const first = await client.callTool({ name: "explode", arguments: { n: 1 } });
    expect(first.isError).toBe(true);
    expect(textOf(first)).toMatch(/connection to the server broke/);
    const again = await client.callTool({ name: "explode", arguments: { n: 1 } });
    expect(again.isError).toBe(true);
    expect(textOf(again)).toContain("Outcome indeterminate");
    expect(origin.runs("explode")).toBe(1);
  });
});

describe("limits and pass", () => {
  it("a per-tool limit refusing a call: an isError result the client does not throw on, with retry-after-ms", async () => {
    const { client } = await agent("/mcp");
    const ok = await client.callTool({ name: "quota_probe", arguments: {} });
    expect(textOf(ok)).toBe("probe 1");
    const refused = await client.callTool({ name: "quota_probe", arguments: {} });
    expect(refused.isError).toBe(true);
    expect(textOf(refused)).toContain('limit "probes"');
    expect((refused._meta as Record<string, unknown>)["io.sluice/retry-after-ms"]).toBeGreaterThan(0);
    // other tools are not under that limit
    const search = await client.callTool({ name: "search", arguments: { q: "after" } });
    expect(search.isError).toBeFalsy();
    expect(origin.runs("quota_probe")).toBe(1);
  });

  it("a pass tool runs every time", async () => {
    const { client } = await agent("/mcp");
    await client.callTool({ name: "search", arguments: { q: "shoes" } });
    await client.callTool({ name: "search", arguments: { q: "shoes" } });
    expect(origin.runs("search", { q: "shoes" })).toBe(2);
  });
});

describe("trust_annotations", () => {
  it("a tool is guarded until the server's tools/list, read on its way, marks it read-only", async () => {
    const { client } = await agent("/trusting-json-mcp");
    await client.callTool({ name: "search", arguments: { q: "before" } });
    await client.callTool({ name: "search", arguments: { q: "before" } });
    expect(origin.runs("search", { q: "before" })).toBe(1);
    const listed = await client.listTools();
    expect(listed.tools.find((t) => t.name === "search")?.annotations?.readOnlyHint).toBe(true);
    // the list is read from a copy after the answer: ask until a repeat runs again (bounded tries, no clock)
    let ran = 1;
    for (let i = 0; i < 50 && ran < 2; i++) {
      await client.callTool({ name: "search", arguments: { q: `after-${i}` } });
      await client.callTool({ name: "search", arguments: { q: `after-${i}` } });
      ran = origin.runs("search", { q: `after-${i}` });
    }
    expect(ran).toBe(2);
    // a tool it does not mark stays guarded
    await client.callTool({ name: "create_order", arguments: { sku: "trust", qty: 1 } });
    await client.callTool({ name: "create_order", arguments: { sku: "trust", qty: 1 } });
    expect(origin.runs("create_order", { sku: "trust", qty: 1 })).toBe(1);
  });
});

describe("messages refused outright", () => {
  it("a 2026-07-28 header that disagrees with the body is a 400 JSON-RPC error, never forwarded", async () => {
    const args = { sku: "hdr", qty: 1 };
    const method = await rawPost("/stateless-mcp", callBody(1, "create_order", args), { "mcp-method": "tools/list" });
    expect(method.status).toBe(400);
    const name = await rawPost("/stateless-mcp", callBody(2, "create_order", args), {
      "mcp-method": "tools/call",
      "mcp-name": "search",
    });
    expect(name.status).toBe(400);
    expect(await name.json()).toMatchObject({ jsonrpc: "2.0", id: 2, error: { code: -32020 } });
    expect(origin.runs("create_order", args)).toBe(0);
  });

  it("a JSON array (batch) is refused", async () => {
    const res = await rawPost("/stateless-mcp", [callBody(1, "create_order", { sku: "b", qty: 1 })]);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { code: -32600 } });
    expect(origin.runs("create_order", { sku: "b", qty: 1 })).toBe(0);
  });
});
