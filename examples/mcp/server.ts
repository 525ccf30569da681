/**
 * A small MCP server on the official TypeScript SDK (v1, `McpServer` on node:http, loopback):
 * `create_order` has a side effect (it counts orders), `search` has none. An order takes as long
 * as `slowMs` says, so that an agent's timeout can be played.
 *
 *   npx tsx examples/mcp/server.ts          # listens on 127.0.0.1:8788
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

export interface Shop {
  url: string;
  /** Orders created, by SKU. */
  orders: Map<string, number>;
  close(): Promise<void>;
}

function shopServer(orders: Map<string, number>, slowMs: number): McpServer {
  const server = new McpServer({ name: "shop", version: "1.0.0" });
  server.registerTool(
    "create_order",
    { description: "Create an order", inputSchema: { sku: z.string(), qty: z.number() } },
    async ({ sku, qty }) => {
      orders.set(sku, (orders.get(sku) ?? 0) + 1);
      console.log(`order #${orders.get(sku)} for ${sku}`);
      await new Promise((r) => setTimeout(r, slowMs));
      return { content: [{ type: "text", text: `order for ${qty} x ${sku} created` }] };
    },
  );
  server.registerTool(
    "search",
    { description: "Search the catalogue", inputSchema: { q: z.string() }, annotations: { readOnlyHint: true } },
    ({ q }) => ({ content: [{ type: "text", text: `3 results for ${q}` }] }),
  );
  return server;
}

async function bodyOf(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return chunks.length === 0 ? undefined : JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

/** Starts the shop on `port` (0: any free one), each session its own transport. */
export async function startShop(port = 8788, slowMs = 0): Promise<Shop> {
  const orders = new Map<string, number>();
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const http: Server = createServer(async (req, res) => {
    const body = req.method === "POST" ? await bodyOf(req) : undefined;
    const sid = req.headers["mcp-session-id"];
    let transport = typeof sid === "string" ? sessions.get(sid) : undefined;
    if (!transport) {
      const made = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => void sessions.set(id, made),
      });
      await shopServer(orders, slowMs).connect(made);
      transport = made;
    }
    await transport.handleRequest(req, res, body);
  });
  await new Promise<void>((r) => http.listen(port, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}`,
    orders,
    close: async () => {
      await Promise.allSettled([...sessions.values()].map((t) => t.close()));
      http.closeAllConnections();
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}

if (process.argv[1]?.endsWith("server.ts")) {
  const shop = await startShop(8788, Number(process.env.SLOW_MS ?? 1500));
  console.log(`shop MCP server on ${shop.url}/mcp`);
}
