/*
 * A refused call told to the model: the problem sluice would answer a plain HTTP request with
 * (a limit's 429, a duplicate's 409, …) turned into a tool result with `isError`, HTTP 200,
 * keeping the `RateLimit` headers. Never stored under the call's key.
 */
import type { McpOutcome } from "../../metrics/mcp.js";
import type { Problem } from "../../problem.js";
import { CLAIM_REFUSALS } from "./cores.js";
import { rpcAnswer, toolRefusal, type RpcId } from "./jsonrpc.js";

/** Headers of a refusal's problem that the tool result keeps: the limits' state. */
const KEPT = ["ratelimit", "ratelimit-policy"];

/** How long the problem says to wait: its `retry_after_ms`, else its `Retry-After` in ms; none when it says none. */
function retryAfterMsOf(p: Problem): number | undefined {
  const exact = p.init.extensions?.retry_after_ms;
  if (typeof exact === "number") return exact;
  const header = Object.entries(p.init.headers ?? {}).find(([h]) => h.toLowerCase() === "retry-after")?.[1];
  return header === undefined ? undefined : Number(header) * 1000;
}

/** What the figures count a refused call as. */
export function refusalOutcome(p: Problem): McpOutcome {
  if (p.init.type === CLAIM_REFUSALS.indeterminate) return "indeterminate";
  if (p.init.type === CLAIM_REFUSALS.mismatch) return "mismatch";
  if (p.init.type === CLAIM_REFUSALS.notStored) return "replay";
  return "refused";
}

/** The tool result for call `id` of `tool` refused with problem `p`, as the HTTP 200 answer. */
export function refusalAnswer(id: RpcId, tool: string, p: Problem): Response {
  const retryAfterMs = retryAfterMsOf(p);
  const when = retryAfterMs === undefined ? "" : ` Calling it again may work in ${retryAfterMs} ms.`;
  const text = `sluice did not run this call of "${tool}": ${p.init.type.title}: ${p.init.detail}.${when}`;
  const headers: Record<string, string> = {};
  for (const [h, v] of Object.entries(p.init.headers ?? {})) if (KEPT.includes(h.toLowerCase())) headers[h] = v;
  return rpcAnswer(toolRefusal(id, text, retryAfterMs), 200, headers);
}

/** A guarded call whose outcome the server left unknown (no answer in time, a connection broken after sending). */
export function unknownOutcome(id: RpcId, tool: string, awaited: boolean): Response {
  const text = awaited
    ? `The server did not answer this call of "${tool}" in time. It may still be running: sluice keeps waiting for its result, and a call made again with the same arguments gets it.`
    : `The connection to the server broke after this call of "${tool}" was sent: it may have run, and its outcome is unknown. Calling it again is refused until an operator resolves it.`;
  return rpcAnswer(toolRefusal(id, text, awaited ? 1_000 : 60_000));
}

/** A call the server could not be sent (nothing ran). */
export function notSent(id: RpcId, tool: string): Response {
  return rpcAnswer(
    toolRefusal(id, `sluice could not reach the server with this call of "${tool}": nothing ran.`, 1_000),
  );
}
