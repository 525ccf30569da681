/**
 * The incident, played by an agent on the official SDK client: it orders, gives up after
 * `timeoutMs` (the SDK sends `notifications/cancelled`), and orders again with a new request id
 * from a new session, as a model that retries does.
 *
 *   npx tsx examples/mcp/agent.ts http://127.0.0.1:8787/mcp     # through sluice (wrangler dev)
 *   npx tsx examples/mcp/agent.ts http://127.0.0.1:8788/mcp     # straight to the server
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

/** One call of `create_order` from a fresh session: its text, or the error it threw. */
export async function orderOnce(url: string, timeoutMs: number): Promise<string> {
  const client = new Client({ name: "agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    const result = await client.callTool({ name: "create_order", arguments: { sku: "sku-42", qty: 1 } }, undefined, {
      timeout: timeoutMs,
    });
    return (result.content as Array<{ text: string }>)[0]?.text ?? "";
  } catch (e) {
    return `threw: ${(e as Error).message}`;
  } finally {
    await client.close();
  }
}

if (process.argv[1]?.endsWith("agent.ts")) {
  const url = process.argv[2] ?? "http://127.0.0.1:8787/mcp";
  console.log("first try: ", await orderOnce(url, 500));
  console.log("the retry: ", await orderOnce(url, 60_000));
}
