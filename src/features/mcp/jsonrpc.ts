/*
 * The JSON-RPC 2.0 that MCP's Streamable HTTP carries: one message per POST body (no batches
 * since 2025-06-18), read to tell a `tools/call` from everything else, and the answers sluice
 * makes itself, each a fresh response with the asking request's own `id`.
 */

/** A JSON-RPC request id: a string or a number (MCP forbids null). */
export type RpcId = string | number;

/** One message as a POST body carries it, for sluice's purposes. */
export type Message =
  | { kind: "request"; id: RpcId; method: string; params: Record<string, unknown>; body: Record<string, unknown> }
  | { kind: "notification"; method: string; params: Record<string, unknown> }
  | { kind: "batch" }
  /** A response (a client answering a server's request), or anything not JSON-RPC: the server judges it. */
  | { kind: "other" };

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** The message a POST body holds (`text`, as UTF-8). */
export function readMessage(text: string): Message {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { kind: "other" };
  }
  if (Array.isArray(parsed)) return { kind: "batch" };
  if (!isObject(parsed) || typeof parsed.method !== "string") return { kind: "other" };
  const params = isObject(parsed.params) ? parsed.params : {};
  if (!("id" in parsed)) return { kind: "notification", method: parsed.method, params };
  const id = parsed.id;
  if (typeof id !== "string" && typeof id !== "number") return { kind: "other" };
  return { kind: "request", id, method: parsed.method, params, body: parsed };
}

/** A JSON-RPC response message: a result or an error, for the request `id`. */
export interface RpcResponse {
  id: RpcId;
  result?: Record<string, unknown>;
  error?: { code: number; message: string; data?: unknown };
}

/** The response to request `id` in a parsed message, or nothing (a notification, a request, another id). */
export function responseFor(message: unknown, id: RpcId): RpcResponse | undefined {
  if (!isObject(message) || message.id !== id || "method" in message) return undefined;
  if (isObject(message.result)) return { id, result: message.result };
  if (isObject(message.error)) {
    const { code, message: text } = message.error;
    return { id, error: { code: typeof code === "number" ? code : -32603, message: String(text) } };
  }
  return undefined;
}

/** The message text of a response, as sluice sends it. */
export function responseText(r: RpcResponse): string {
  return JSON.stringify({ jsonrpc: "2.0", id: r.id, ...(r.error ? { error: r.error } : { result: r.result }) });
}

/** An answer of sluice's own: one JSON-RPC message, `application/json`, no header of any stored answer. */
export function rpcAnswer(r: RpcResponse, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(responseText(r), {
    status,
    headers: { "content-type": "application/json", "cache-control": "no-store", ...headers },
  });
}

/**
 * JSON-RPC error codes sluice answers with: an invalid request (a batch), and the 2026-07-28
 * revision's header mismatch (a routing header that disagrees with the body).
 */
export const RPC_ERRORS = { invalidRequest: -32600, headerMismatch: -32020 } as const;

/** A JSON-RPC error for a message sluice refuses outright (HTTP 400): a batch, a header that disagrees with its body. */
export function rpcRefusal(id: RpcId | null, code: number, message: string): Response {
  const body = JSON.stringify({ jsonrpc: "2.0", id, error: { code, message } });
  return new Response(body, {
    status: 400,
    headers: { "content-type": "application/json", "cache-control": "no-store" },
  });
}

/** The `_meta` key of sluice's hint for a refused call: how long to wait before calling again. */
export const RETRY_AFTER_META = "io.sluice/retry-after-ms";
/** The `_meta` key a client may give a call's idempotency key in. */
export const KEY_META = "io.sluice/idempotency-key";
/** The `_meta` key the forwarded call carries its fencing token in. */
export const FENCE_META = "io.sluice/fencing-token";

/**
 * A call sluice refuses, as a tool result the model reads (`isError`), never a transport error:
 * MCP reports tool failures as results "otherwise the LLM would not be able to see that an error
 * occurred and self-correct". `retryAfterMs` says when calling again may work.
 */
export function toolRefusal(id: RpcId, text: string, retryAfterMs?: number): RpcResponse {
  return {
    id,
    result: {
      isError: true,
      content: [{ type: "text", text }],
      ...(retryAfterMs === undefined ? {} : { _meta: { [RETRY_AFTER_META]: retryAfterMs } }),
    },
  };
}
