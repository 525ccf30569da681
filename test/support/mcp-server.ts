import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

/**
 * The official TypeScript SDK's MCP server (v1: `McpServer` and `StreamableHTTPServerTransport`
 * on node:http, loopback only), as an origin for sluice, with three endpoints:
 * - `/mcp`: sessions (`Mcp-Session-Id`), answers as event streams (the SDK's default);
 * - `/json-mcp` (any path ending so): sessions, answers as JSON (`enableJsonResponse`);
 * - `/stateless-mcp` (any path starting so): no sessions (a server and transport per request).
 * Its tools count their runs by tool and arguments; a tool waits on a gate the test opens (no
 * sleeps); `explode` breaks the connection after reading the call.
 */
export interface McpOrigin {
  url: string;
  /** Runs of a tool with these arguments (JSON of the arguments as the tool got them). */
  runs(tool: string, args?: Record<string, unknown>): number;
  /** A gate for `slow` calls with this `ref`: they wait until `open()`; `entered` resolves when one is waiting. */
  gate(ref: string): { open: () => void; entered: Promise<void> };
  /** Whether a call of `slow` with this ref saw its cancel (its signal aborted) by the time it finished. */
  cancelled(ref: string): boolean | undefined;
  /** Fencing tokens the server got in `_meta["io.sluice/fencing-token"]`, in order. */
  fences: string[];
  close(): Promise<void>;
}

interface Gate {
  open: () => void;
  opened: Promise<void>;
  enter: () => void;
  entered: Promise<void>;
}

function newGate(): Gate {
  let open = () => undefined as void;
  let enter = () => undefined as void;
  const opened = new Promise<void>((r) => (open = r));
  const entered = new Promise<void>((r) => (enter = r));
  return { open, opened, enter, entered };
}

function toolServer(state: ServerState): McpServer {
  const server = new McpServer({ name: "shop", version: "1.0.0" });
  const ran = (tool: string, args: unknown, meta: unknown) => {
    const key = `${tool} ${JSON.stringify(args)}`;
    state.runs.set(key, (state.runs.get(key) ?? 0) + 1);
    const fence = (meta as Record<string, unknown> | undefined)?.["io.sluice/fencing-token"];
    if (typeof fence === "string") state.fences.push(fence);
    return state.runs.get(key) ?? 0;
  };
  const order = { sku: z.string(), qty: z.number() };
  server.registerTool("create_order", { inputSchema: order }, (args, extra) => {
    const n = ran("create_order", args, extra._meta);
    return { content: [{ type: "text", text: `order ${args.sku} x${args.qty} created (run ${n})` }] };
  });
  server.registerTool(
    "search",
    { inputSchema: { q: z.string() }, annotations: { readOnlyHint: true } },
    (args, extra) => {
      const n = ran("search", args, extra._meta);
      return { content: [{ type: "text", text: `results for ${args.q} (run ${n})` }] };
    },
  );
  server.registerTool("quota_probe", {}, (extra) => {
    const n = ran("quota_probe", {}, extra._meta);
    return { content: [{ type: "text", text: `probe ${n}` }] };
  });
  server.registerTool("refund", { inputSchema: { order: z.string() } }, (args, extra) => {
    ran("refund", args, extra._meta);
    return { content: [{ type: "text", text: `refund of ${args.order} failed` }], isError: true };
  });
  server.registerTool("slow", { inputSchema: { ref: z.string() } }, async (args, extra) => {
    ran("slow", args, extra._meta);
    const gate = state.gate(args.ref);
    gate.enter();
    await gate.opened;
    state.cancels.set(args.ref, extra.signal.aborted);
    return { content: [{ type: "text", text: `slow ${args.ref} done` }] };
  });
  return server;
}

interface ServerState {
  runs: Map<string, number>;
  fences: string[];
  gates: Map<string, Gate>;
  cancels: Map<string, boolean>;
  gate(ref: string): Gate;
}

/** The body of a POST, read whole (the SDK transport accepts it pre-parsed). */
async function bodyOf(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString("utf8");
  return text === "" ? undefined : JSON.parse(text);
}

function isInitialize(body: unknown): boolean {
  return typeof body === "object" && body !== null && (body as { method?: unknown }).method === "initialize";
}

function explodes(body: unknown, state: ServerState): boolean {
  const b = body as { method?: string; params?: { name?: string; arguments?: unknown } } | undefined;
  if (b?.method !== "tools/call" || b.params?.name !== "explode") return false;
  const key = `explode ${JSON.stringify(b.params.arguments ?? {})}`;
  state.runs.set(key, (state.runs.get(key) ?? 0) + 1);
  return true;
}

/** Starts the server on a free loopback port. */
export async function startMcpOrigin(): Promise<McpOrigin> {
  const state: ServerState = {
    runs: new Map(),
    fences: [],
    gates: new Map(),
    cancels: new Map(),
    gate(ref) {
      const g = this.gates.get(ref) ?? newGate();
      this.gates.set(ref, g);
      return g;
    },
  };
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? "/").split("?")[0];
    const body = req.method === "POST" ? await bodyOf(req) : undefined;
    if (explodes(body, state)) {
      res.socket?.destroy();
      return;
    }
    if (path?.startsWith("/stateless")) {
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      await toolServer(state).connect(transport);
      await transport.handleRequest(req, res, body);
      return;
    }
    const json = path?.endsWith("json-mcp") === true;
    const sid = req.headers["mcp-session-id"];
    let transport = typeof sid === "string" ? sessions.get(sid) : undefined;
    if (!transport && isInitialize(body)) {
      const made = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: json,
        onsessioninitialized: (id) => void sessions.set(id, made),
      });
      await toolServer(state).connect(made);
      transport = made;
    }
    if (!transport) {
      res
        .writeHead(404, { "content-type": "application/json" })
        .end('{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}');
      return;
    }
    await transport.handleRequest(req, res, body);
  };
  const http: Server = createServer((req, res) => {
    handle(req, res).catch((e: unknown) => {
      if (!res.headersSent) res.writeHead(500).end(String(e));
    });
  });
  await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    runs: (tool, args) => {
      if (args) return state.runs.get(`${tool} ${JSON.stringify(args)}`) ?? 0;
      let n = 0;
      for (const [k, v] of state.runs) if (k.startsWith(`${tool} `)) n += v;
      return n;
    },
    gate: (ref) => {
      const g = state.gate(ref);
      return { open: g.open, entered: g.entered };
    },
    cancelled: (ref) => state.cancels.get(ref),
    fences: state.fences,
    close: async () => {
      await Promise.allSettled([...sessions.values()].map((t) => t.close()));
      http.closeAllConnections();
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}
