import type { Context, Next } from "hono";
import type { Route } from "../../config/index.js";
import { limitsWaived, type Scope, type SluiceEnv, type Step } from "../../context.js";
import { countMcpCall, type McpOutcome } from "../../metrics/mcp.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { readCapped } from "../../util/body.js";
import { answerOf } from "./answer-of.js";
import { appliesTo, headerMismatch, isGuarded, toolCallOf, type ToolCall } from "./call.js";
import { afterCall, callLimitHeaders, decideCall } from "./cores.js";
import { guardedCall, withBody, type CallAnswer } from "./guarded.js";
import { McpIsolate } from "./isolate.js";
import { readMessage, rpcRefusal, RPC_ERRORS, type Message } from "./jsonrpc.js";
import { refusalAnswer } from "./refusals.js";
import type { McpSettings } from "./schema.js";
import type { OnRefusal } from "../rate-limit/step.js";

/** The largest message sluice reads from a POST to an MCP endpoint (it must read it to know what it is). */
const MAX_MESSAGE_BYTES = 10 * 1024 * 1024;

/**
 * A route with an `mcp` table is an MCP endpoint (Streamable HTTP; docs/mcp.md). Each POSTed
 * message is read: a `tools/call` is decided as its own request (the limits that apply to its tool,
 * then, guarded, one run per principal, tool and arguments); a client's cancel of a guarded call
 * is answered here and never reaches the server; a batch, or a 2026-07-28 routing header that
 * disagrees with the body, is refused; everything else (the handshake, lists, notifications, the
 * GET stream, DELETE) goes to the server as it came, its answer unbuffered. The route's limits and
 * guards are the calls', so the steps after this one see none. `refused` is what a call's refusal
 * sets off besides its answer, as for the route's (a count towards a ban).
 */
export const mcpStep =
  (refused: OnRefusal): Step =>
  async (c, scope, next) => {
    const route = scope.route;
    const mcp = route?.mcp;
    if (!route || !mcp) return next();
    scope.route = { ...route, limits: [], idempotency: undefined, session: undefined };
    if (scope.method !== "POST") return next();
    const bytes = await readMessageBytes(c.req.raw);
    // the same bytes go on, whatever they are: a message sluice cannot read is the server's to judge
    c.req.raw = withBody(c.req.raw, bytes);
    const message = readMessage(new TextDecoder().decode(bytes));
    if (message.kind === "batch")
      return rpcRefusal(
        null,
        RPC_ERRORS.invalidRequest,
        "a JSON array (batch) is not accepted: send one message per request",
      );
    const mismatch = headerMismatch(c.req.raw.headers, message);
    if (mismatch)
      return rpcRefusal(message.kind === "request" ? message.id : null, RPC_ERRORS.headerMismatch, mismatch);
    const isolate = scope.runtime.own(McpIsolate);
    if (message.kind === "notification" && message.method === "notifications/cancelled") {
      // a guarded call's cancel would make the server drop its result: answered here, not forwarded
      if (isolate.callGuarded(route.name, sessionOf(c), message.params.requestId) !== false)
        return new Response(null, { status: 202 });
      return next();
    }
    const call = toolCallOf(message);
    if (call) return toolCall(c, scope, { route, mcp, call, isolate, refused }, next);
    await next();
    if (mcp.trust_annotations) listedTools(c, scope, route, message, isolate);
  };

/** The message: the whole body, read (413 past the bound). */
async function readMessageBytes(request: Request): Promise<Uint8Array> {
  const read = await readCapped(request.body, MAX_MESSAGE_BYTES);
  if (!read.whole)
    throw new Problem({
      type: PROBLEMS.requestTooLarge,
      detail: `a message to an MCP endpoint may be at most ${MAX_MESSAGE_BYTES} bytes`,
    });
  return read.bytes;
}

/** The session a request belongs to, for placing a cancel (none in the 2026-07-28 revision: ""). */
function sessionOf(c: Context<SluiceEnv>): string {
  return c.req.raw.headers.get("mcp-session-id") ?? "";
}

/** The route, its table, the call, the isolate's memory and what a refusal sets off, for one call. */
interface CallPlace {
  route: Route;
  mcp: McpSettings;
  call: ToolCall;
  isolate: McpIsolate;
  refused: OnRefusal;
}

/** One `tools/call`: its tool's limits, then guarded or passed through; counted per tool. */
async function toolCall(c: Context<SluiceEnv>, scope: Scope, place: CallPlace, next: Next): Promise<Response> {
  const { route, mcp, call, isolate, refused } = place;
  scope.facts.tool = call.tool;
  const named = mcp.pass.includes(call.tool) || (mcp.guard !== "all" && mcp.guard.includes(call.tool));
  const label = isolate.label(route.name, call.tool, named || route.limits.some((l) => l.tools?.includes(call.tool)));
  const count = (o: McpOutcome) => countMcpCall(scope.runtime.metrics, route.name, label, o);
  // an allow-listed client, or a request the degrade switch let on: its calls' limits are not asked
  const limits = limitsWaived(c, scope) ? {} : await decideCall(scope, route, appliesTo(call.tool), refused);
  if (limits.refusal) {
    count("refused");
    return refusalAnswer(call.id, call.tool, limits.refusal);
  }
  const guarded = isGuarded(mcp, call.tool, isolate.trusted(route.name, call.tool));
  const settled = isolate.callStarted(route.name, sessionOf(c), call.id, guarded);
  let answer: CallAnswer;
  try {
    answer = guarded
      ? await guardedCall({ c, scope, route, mcp, call, label, next, settled })
      : await passed(c, next, settled);
  } catch (e) {
    settled();
    afterCall(scope, limits.run, false);
    throw e;
  }
  count(answer.outcome);
  afterCall(scope, limits.run, answer.replayed);
  const res = answer.response;
  for (const [h, v] of Object.entries(callLimitHeaders(limits.run))) res.headers.set(h, v);
  return res;
}

/** A call not guarded: to the server as it came, its answer untouched. */
async function passed(c: Context<SluiceEnv>, next: Next, settled: () => void): Promise<CallAnswer> {
  try {
    await next();
  } finally {
    settled();
  }
  return { response: c.res, replayed: false, outcome: "passed" };
}

/**
 * A `tools/list` answer read as it passes (from a copy: the client's is not held up): the tools
 * the server marks read-only or idempotent, for `trust_annotations`.
 */
function listedTools(c: Context<SluiceEnv>, scope: Scope, route: Route, message: Message, isolate: McpIsolate): void {
  if (message.kind !== "request" || message.method !== "tools/list") return;
  const res = c.res;
  if (res.status !== 200 || !res.body) return;
  const [toClient, toRead] = res.body.tee();
  c.res = new Response(toClient, res);
  scope.defer(answerOf(res, toRead, message.id).then((answer) => isolate.noteTools(route.name, answer?.result?.tools)));
}
