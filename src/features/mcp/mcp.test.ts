import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { loadConfig, type Limit } from "../../config/index.js";
import { mcpLines } from "../../metrics/mcp.js";
import { problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { responseInStream } from "./answer-of.js";
import { appliesTo, derivedCallKey, headerMismatch, isGuarded, toolCallOf, withFence } from "./call.js";
import { McpIsolate, MAX_TOOL_LABELS } from "./isolate.js";
import { readMessage, responseFor } from "./jsonrpc.js";
import { mcpSettings } from "./schema.js";

const call = (id: number | string, name: string, args: unknown, meta?: Record<string, unknown>) =>
  JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args, _meta: meta } });

describe("reading a message", () => {
  it("tells a call, a notification, a batch and anything else apart", () => {
    expect(readMessage(call(1, "create_order", { a: 1 }))).toMatchObject({
      kind: "request",
      id: 1,
      method: "tools/call",
    });
    expect(readMessage('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}')).toEqual({
      kind: "notification",
      method: "notifications/cancelled",
      params: { requestId: 3 },
    });
    expect(readMessage("[]").kind).toBe("batch");
    expect(readMessage("not json").kind).toBe("other");
    expect(readMessage('{"jsonrpc":"2.0","id":null,"method":"x"}').kind).toBe("other");
    expect(readMessage('{"jsonrpc":"2.0","id":4,"result":{}}').kind).toBe("other");
  });

  it("a tools/call's tool, arguments and _meta key; none for a call without a name", () => {
    const c = toolCallOf(readMessage(call("a", "create_order", { sku: "x" }, { "io.sluice/idempotency-key": "k-1" })));
    expect(c).toMatchObject({ id: "a", tool: "create_order", args: { sku: "x" }, metaKey: "k-1" });
    expect(toolCallOf(readMessage(call(1, "", {})))).toBeUndefined();
    expect(toolCallOf(readMessage('{"jsonrpc":"2.0","id":1,"method":"tools/list"}'))).toBeUndefined();
  });

  it("the response for an id: a result or an error, never another id's or a request", () => {
    expect(responseFor({ jsonrpc: "2.0", id: 2, result: { content: [] } }, 2)).toEqual({
      id: 2,
      result: { content: [] },
    });
    expect(responseFor({ jsonrpc: "2.0", id: 2, error: { code: -1, message: "no" } }, 2)?.error?.code).toBe(-1);
    expect(responseFor({ jsonrpc: "2.0", id: 3, result: {} }, 2)).toBeUndefined();
    expect(responseFor({ jsonrpc: "2.0", id: "2", result: {} }, 2)).toBeUndefined();
    expect(responseFor({ jsonrpc: "2.0", id: 2, method: "sampling/createMessage" }, 2)).toBeUndefined();
  });
});

describe("a call's key", () => {
  it("is the tool and its canonical arguments: member order and spelling of numbers do not matter", async () => {
    const a = toolCallOf(
      readMessage('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"b":1.0,"a":[2]}}}'),
    );
    const b = toolCallOf(
      readMessage('{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t","arguments":{"a":[2],"b":1}}}'),
    );
    const c = toolCallOf(
      readMessage('{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t","arguments":{"a":[2],"b":"1"}}}'),
    );
    const other = toolCallOf(
      readMessage('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"u","arguments":{"b":1,"a":[2]}}}'),
    );
    if (!a || !b || !c || !other) throw new Error("calls expected");
    expect(await derivedCallKey(a)).toBe(await derivedCallKey(b));
    expect(await derivedCallKey(c)).not.toBe(await derivedCallKey(a));
    expect(await derivedCallKey(other)).not.toBe(await derivedCallKey(a));
  });

  it("the forwarded call carries its fencing token in _meta, the client's own _meta kept", () => {
    const c = toolCallOf(readMessage(call(1, "t", {}, { progressToken: 1 })));
    if (!c) throw new Error("call expected");
    expect(JSON.parse(withFence(c, "17")).params._meta).toEqual({ progressToken: 1, "io.sluice/fencing-token": "17" });
  });
});

describe("which calls are guarded and limited", () => {
  const settings = (s: Record<string, unknown>) => mcpSettings().parse(s);

  it('"all" by default, pass never, annotations only when trusted', () => {
    expect(isGuarded(settings({}), "anything", false)).toBe(true);
    expect(isGuarded(settings({ pass: ["search"] }), "search", false)).toBe(false);
    expect(isGuarded(settings({ guard: ["create_order"] }), "search", false)).toBe(false);
    expect(isGuarded(settings({ guard: ["create_order"] }), "create_order", false)).toBe(true);
    expect(isGuarded(settings({}), "lookup", true)).toBe(true);
    expect(isGuarded(settings({ trust_annotations: true }), "lookup", true)).toBe(false);
  });

  it("a limit's tools narrow it to those tools", () => {
    const limits = [{ name: "all" }, { name: "orders", tools: ["create_order"] }] as unknown as Limit[];
    expect(limits.filter(appliesTo("create_order")).map((l) => l.name)).toEqual(["all", "orders"]);
    expect(limits.filter(appliesTo("search")).map((l) => l.name)).toEqual(["all"]);
  });

  it("the server's tools/list marks tools trusted for this route only, read-only or idempotent ones", () => {
    const isolate = new McpIsolate();
    isolate.noteTools("r", [
      { name: "lookup", annotations: { readOnlyHint: true } },
      { name: "put", annotations: { idempotentHint: true } },
      { name: "create", annotations: { destructiveHint: true } },
    ]);
    expect([isolate.trusted("r", "lookup"), isolate.trusted("r", "put"), isolate.trusted("r", "create")]).toEqual([
      true,
      true,
      false,
    ]);
    expect(isolate.trusted("other", "lookup")).toBe(false);
  });

  it("labels stay bounded whatever tool names clients invent", () => {
    const isolate = new McpIsolate();
    const labels = Array.from({ length: MAX_TOOL_LABELS + 10 }, (_, i) => isolate.label("r", `t${i}`, false));
    expect(new Set(labels).size).toBe(MAX_TOOL_LABELS + 1);
    expect(labels.at(-1)).toBe("other");
    expect(isolate.label("r", "named_in_config", true)).toBe("named_in_config");
    expect(isolate.label("r", "bad|name", false)).toBe("other");
  });

  it("a cancel names a guarded call in flight, a passed one, or one this isolate does not know", () => {
    const isolate = new McpIsolate();
    const done = isolate.callStarted("r", "s1", 4, true);
    isolate.callStarted("r", "s1", 5, false);
    expect(isolate.callGuarded("r", "s1", 4)).toBe(true);
    expect(isolate.callGuarded("r", "s1", 5)).toBe(false);
    expect(isolate.callGuarded("r", "s2", 4)).toBeUndefined();
    done();
    expect(isolate.callGuarded("r", "s1", 4)).toBeUndefined();
  });
});

describe("the 2026-07-28 routing headers", () => {
  const msg = readMessage(call(1, "create_order", {}));
  const h = (o: Record<string, string>) => new Headers(o);
  it("agreeing with the body, or absent: fine; disagreeing: named", () => {
    expect(headerMismatch(h({}), msg)).toBeUndefined();
    expect(headerMismatch(h({ "mcp-method": "tools/call", "mcp-name": "create_order" }), msg)).toBeUndefined();
    expect(headerMismatch(h({ "mcp-method": "tools/list" }), msg)).toMatch(/Mcp-Method/);
    expect(headerMismatch(h({ "mcp-method": "tools/call", "mcp-name": "search" }), msg)).toMatch(/Mcp-Name/);
    const encoded = `=?base64?${btoa("create_order")}?=`;
    expect(headerMismatch(h({ "mcp-method": "tools/call", "mcp-name": encoded }), msg)).toBeUndefined();
  });
});

describe("the final response of an event stream", () => {
  const response = { jsonrpc: "2.0", id: 7, result: { content: [{ type: "text", text: "done\nline" }] } };
  const stream = [
    ": keep-alive\n\n",
    "event: message\nid: 1\ndata: " +
      JSON.stringify({ jsonrpc: "2.0", method: "notifications/progress", params: {} }) +
      "\n\n",
    "event: message\r\ndata: " + JSON.stringify({ jsonrpc: "2.0", id: 6, result: {} }) + "\r\n\r\n",
    "data: " + JSON.stringify(response) + "\n\n",
    "data: after\n\n",
  ].join("");

  const chunked = (text: string, cuts: number[]) => {
    const bytes = new TextEncoder().encode(text);
    const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
    const pieces = [0, ...points, bytes.length].flatMap((p, i, all) => (i === 0 ? [] : [bytes.slice(all[i - 1], p)]));
    return new ReadableStream<Uint8Array>({
      start(c) {
        pieces.forEach((p) => c.enqueue(p));
        c.close();
      },
    });
  };

  it("is found however the stream is cut into chunks", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.nat(), { maxLength: 12 }), async (cuts) => {
        expect(await responseInStream(chunked(stream, cuts), 7)).toEqual({ id: 7, result: response.result });
      }),
    );
  });

  it("a stream that ends or breaks before it: none", async () => {
    expect(await responseInStream(chunked(stream.slice(0, stream.indexOf('"id":7')), []), 7)).toBeUndefined();
    const broken = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode(": hi\n\n"));
        c.error(new Error("reset"));
      },
    });
    expect(await responseInStream(broken, 7)).toBeUndefined();
  });
});

describe("configuration", () => {
  const vars = (routes: unknown[]) => ({ ORIGIN_URL: "https://o.example", SLUICE: { routes } });
  const errorOf = (routes: unknown[]) => {
    const r = loadConfig(vars(routes));
    return r.ok ? undefined : r.error.label + ": " + r.error.problem;
  };

  it("the mcp table's defaults", () => {
    const r = loadConfig(vars([{ name: "t", match: "/mcp", mcp: {} }]));
    if (!r.ok) throw r.error;
    expect(r.config.routes[0]?.mcp).toEqual({
      guard: "all",
      pass: [],
      trust_annotations: false,
      window: 600_000,
      wait: 20_000,
    });
  });

  it("errors name the field", () => {
    expect(errorOf([{ name: "t", match: "/mcp", mcp: { guard: "some" } }])).toMatch(/mcp\.guard/);
    expect(errorOf([{ name: "t", match: "/mcp", mcp: { pass: ["a b"] } }])).toMatch(/mcp\.pass\[0\].*tool name/);
    expect(errorOf([{ name: "t", match: "/mcp", mcp: { wait: "1m" } }])).toMatch(/mcp\.wait.*at most 25s/);
    expect(errorOf([{ name: "t", match: "/mcp", mcp: { window: "10s" } }])).toMatch(/mcp\.window.*origin_timeout/);
    expect(errorOf([{ name: "t", match: "/mcp", mcp: {}, session: { key: "header:s" } }])).toMatch(/session/);
    const limit = { name: "l", rate: 1, period: "1s" };
    expect(errorOf([{ name: "t", match: "/x", limits: [{ ...limit, tools: ["a"] }] }])).toMatch(
      /limits\[0\].*tools.*mcp table/,
    );
    expect(errorOf([{ name: "t", match: "/x", limits: [{ ...limit, key: ["ip", "tool"] }] }])).toMatch(
      /limits\[0\].*key.*mcp table/,
    );
    expect(
      errorOf([{ name: "t", match: "/mcp", mcp: {}, limits: [{ ...limit, key: ["ip", "tool"], tools: ["a"] }] }]),
    ).toBeUndefined();
  });
});

describe("figures", () => {
  it("sluice_mcp_calls_total per route, tool and outcome", () => {
    const lines = mcpLines(
      { "mcp:shop|first:create_order": 2, "mcp:shop|replay:create_order": "3", "shop|-|allow": 9 },
      (v) => v ?? "",
    );
    expect(lines).toContain('sluice_mcp_calls_total{route="shop",tool="create_order",outcome="first"} 2');
    expect(lines).toContain('sluice_mcp_calls_total{route="shop",tool="create_order",outcome="replay"} 3');
    expect(lines).toContain('sluice_mcp_calls_total{route="shop",tool="create_order",outcome="passed"} 0');
    expect(lines.filter((l) => l.startsWith("sluice_mcp_calls_total{"))).toHaveLength(7);
  });
});

describe("retry-after-ms beside Retry-After", () => {
  it("on 409, 429 and 503 problems: the exact retry_after_ms, else the header's seconds", () => {
    const limited = problem({
      type: PROBLEMS.tooManyRequests,
      detail: "x",
      extensions: { retry_after_ms: 1234 },
      headers: { "Retry-After": "2" },
    });
    expect(limited.headers.get("retry-after-ms")).toBe("1234");
    const busy = problem({ type: PROBLEMS.requestInFlight, detail: "x", headers: { "Retry-After": "1" } });
    expect(busy.headers.get("retry-after-ms")).toBe("1000");
    expect(problem({ type: PROBLEMS.forbidden, detail: "x" }).headers.get("retry-after-ms")).toBeNull();
  });
});
