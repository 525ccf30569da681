/*
 * One `tools/call` as sluice decides it: its tool and arguments, the limits that apply to it,
 * whether it is guarded, its key (explicit, or from the tool and its canonical arguments), and
 * the checks of the 2026-07-28 routing headers against the body.
 */
import type { Limit } from "../../config/index.js";
import { canonicalJson } from "../../util/canonical-json.js";
import { sha256Hex } from "../../util/digest.js";
import { FENCE_META, KEY_META, type Message, type RpcId } from "./jsonrpc.js";
import type { McpSettings } from "./schema.js";

/** A `tools/call` request. */
export interface ToolCall {
  id: RpcId;
  tool: string;
  /** `params.arguments` as sent (absent: `{}`). */
  args: unknown;
  /** `params._meta["io.sluice/idempotency-key"]`, when the client gave one. */
  metaKey?: unknown;
  /** The whole message, to forward with the fencing token added. */
  body: Record<string, unknown>;
}

/** The call a message is, or undefined (not a `tools/call`, or one without a tool name: the server answers it). */
export function toolCallOf(message: Message): ToolCall | undefined {
  if (message.kind !== "request" || message.method !== "tools/call") return undefined;
  const { name, arguments: args, _meta: meta } = message.params;
  if (typeof name !== "string" || name === "") return undefined;
  const metaKey = typeof meta === "object" && meta !== null ? (meta as Record<string, unknown>)[KEY_META] : undefined;
  return { id: message.id, tool: name, args: args ?? {}, metaKey, body: message.body };
}

/**
 * Why the 2026-07-28 routing headers disagree with the body (`Mcp-Method` with its method,
 * `Mcp-Name` with a call's tool), or undefined. A gateway that routed or limited on the header
 * alone could be dodged by it; sluice decides on the body and refuses the disagreement.
 */
export function headerMismatch(headers: Headers, message: Message): string | undefined {
  const method = headers.get("mcp-method");
  const name = headers.get("mcp-name");
  if (method === null && name === null) return undefined;
  const bodyMethod = message.kind === "request" || message.kind === "notification" ? message.method : undefined;
  if (method !== null && method.trim() !== bodyMethod)
    return `the Mcp-Method header (${method}) does not match the body's method (${bodyMethod ?? "none"})`;
  if (name === null || message.kind !== "request") return undefined;
  const bodyName = bodyMethod === "tools/call" ? message.params.name : (message.params.name ?? message.params.uri);
  if (headerText(name) !== bodyName)
    return `the Mcp-Name header (${name}) does not match the body's name (${typeof bodyName === "string" ? bodyName : "none"})`;
  return undefined;
}

/**
 * A routing header's value: as sent, or a name outside the header alphabet sent base64-encoded
 * as `=?base64?…?=` (the 2026-07-28 revision's form), decoded.
 */
function headerText(value: string): string {
  const v = value.trim();
  const encoded = /^=\?base64\?([A-Za-z0-9+/=]*)\?=$/.exec(v)?.[1];
  if (encoded === undefined) return v;
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(
      Uint8Array.from(atob(encoded), (ch) => ch.charCodeAt(0)),
    );
  } catch {
    return v;
  }
}

/** Whether a call of `tool` runs at most once: guarded by the table, not passed, not trusted read-only or idempotent. */
export function isGuarded(settings: McpSettings, tool: string, trusted: boolean): boolean {
  if (settings.pass.includes(tool)) return false;
  if (settings.trust_annotations && trusted) return false;
  return settings.guard === "all" || settings.guard.includes(tool);
}

/** Whether a limit applies to a call of `tool`: every limit without `tools`, and those that name it. */
export function appliesTo(tool: string): (limit: Limit) => boolean {
  return (l) => !l.tools || l.tools.includes(tool);
}

/** What a guarded call is, for its key and fingerprint: the tool and its arguments, canonical. */
export function canonicalCall(call: ToolCall): string {
  return canonicalJson({ tool: call.tool, arguments: call.args });
}

/** The key of a call without an explicit one: the SHA-256 of its tool and canonical arguments (the principal scopes it). */
export async function derivedCallKey(call: ToolCall): Promise<string> {
  return `mcp:${await sha256Hex(canonicalCall(call))}`;
}

/** The call as forwarded: its `params._meta` carries the fencing token beside the header. */
export function withFence(call: ToolCall, token: string): string {
  const params = (call.body.params ?? {}) as Record<string, unknown>;
  const meta = typeof params._meta === "object" && params._meta !== null ? params._meta : {};
  return JSON.stringify({ ...call.body, params: { ...params, _meta: { ...meta, [FENCE_META]: token } } });
}
