/*
 * A guarded `tools/call`: run at most once per principal, tool and canonical arguments within the
 * window (or per explicit key). The first goes to the server with a fencing token, its result is
 * kept as a JSON-RPC response (from a JSON body or an event stream); a repeat gets that result,
 * waiting for it while the first runs, always as a fresh response with its own id.
 */
import type { Context, Next } from "hono";
import type { Route } from "../../config/index.js";
import { publish, type Scope, type SluiceEnv } from "../../context.js";
import { observedFirstRun, type McpOutcome } from "../../metrics/mcp.js";
import type { OriginReply } from "../../origin/forward.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { answerOf } from "./answer-of.js";
import { canonicalCall, derivedCallKey, withFence, type ToolCall } from "./call.js";
import {
  claimCall,
  explicitKey,
  stillRunning,
  type CallSubject,
  type Claim,
  type Guarding,
  type StoredAnswer,
} from "./cores.js";
import { responseText, rpcAnswer, toolRefusal, type RpcId, type RpcResponse } from "./jsonrpc.js";
import { notSent, refusalAnswer, refusalOutcome, unknownOutcome } from "./refusals.js";
import type { McpSettings } from "./schema.js";
import { discardBody } from "../../util/log.js";

/** What a guarded call came to: the answer, whether it was a stored result (its limits refunded), and its figure. */
export interface CallAnswer {
  response: Response;
  replayed: boolean;
  outcome: McpOutcome;
}

/** The parts of one guarded call's journey. */
export interface GuardedCall {
  c: Context<SluiceEnv>;
  scope: Scope;
  route: Route;
  mcp: McpSettings;
  call: ToolCall;
  /** The tool's label (figures, ledger). */
  label: string;
  next: Next;
  /** Told when the call's outcome is settled (its cancel need no longer be held back). */
  settled: () => void;
}

/** The call's key: an `Idempotency-Key` header, else `_meta["io.sluice/idempotency-key"]`, else its tool and arguments'. */
async function subjectOf(g: GuardedCall): Promise<CallSubject | Problem> {
  const header = g.c.req.raw.headers.get("idempotency-key");
  const given = header ?? (typeof g.call.metaKey === "string" ? g.call.metaKey : undefined);
  const canonical = canonicalCall(g.call);
  if (given === undefined) return { key: await derivedCallKey(g.call), canonical, tool: g.label };
  const key = explicitKey(given);
  if ("problem" in key) return new Problem({ type: PROBLEMS.invalidIdempotencyKey, detail: key.problem });
  return { key: key.key, canonical, tool: g.label };
}
/**
 * Claims the call: a repeat of one in flight waits up to `mcp.wait` for its result (`joined`).
 * A refusal is thrown as the problem it is.
 */
async function claimed(g: GuardedCall, subject: CallSubject): Promise<{ guarding: Guarding; joined: boolean }> {
  try {
    return { guarding: await claimCall(g.scope, g.route, g.mcp, subject), joined: false };
  } catch (e) {
    if (!stillRunning(e) || g.mcp.wait === 0) throw e;
  }
  return { guarding: await claimCall(g.scope, g.route, g.mcp, subject, g.mcp.wait), joined: true };
}

/** Runs one guarded call to its answer. */
export async function guardedCall(g: GuardedCall): Promise<CallAnswer> {
  const subject = await subjectOf(g);
  if (subject instanceof Problem) return refused(g, subject);
  let claim;
  try {
    claim = await claimed(g, subject);
  } catch (e) {
    if (e instanceof Problem) return refused(g, e);
    throw e;
  }
  const { guarding, joined } = claim;
  if (guarding.kind === "replay") {
    g.scope.decision = "replay";
    g.settled();
    return {
      response: replayed(guarding.answer, g.call.id),
      replayed: true,
      outcome: joined ? "joined" : "replay",
    };
  }
  const held = observedFirstRun(guarding.claim, g.scope.runtime.metrics, g.route.name, g.label);
  return { response: await forwarded(g, held), replayed: false, outcome: "first" };
}

function refused(g: GuardedCall, p: Problem): CallAnswer {
  g.settled();
  return { response: refusalAnswer(g.call.id, g.call.tool, p), replayed: false, outcome: refusalOutcome(p) };
}

/** The stored result, as a fresh response for the repeat's own id (none of the stored answer's headers). */
function replayed(stored: StoredAnswer, id: RpcId): Response {
  try {
    const message = JSON.parse(new TextDecoder().decode(stored.body ?? undefined)) as RpcResponse;
    return rpcAnswer({ ...message, id });
  } catch {
    return rpcAnswer(toolRefusal(id, "sluice holds this call's result but could not read it back."));
  }
}

/**
 * The first call goes to the server, holding its claim: the body with its fencing token in
 * `_meta`, the header beside it. Its answer is settled into the claim (src/features/mcp/settle below).
 */
async function forwarded(g: GuardedCall, held: Claim): Promise<Response> {
  const { c, scope, call } = g;
  const token = held.sluiceHeaders["sluice-fencing-token"] ?? "";
  c.req.raw = withBody(c.req.raw, withFence(call, token));
  // a held claim must learn what the server did: past origin_timeout its answer is still awaited
  const lateAnswerMs = scope.target && held.lateAnswerMs ? held.lateAnswerMs : undefined;
  publish(c, scope, "sluiceGuards", { sluiceHeaders: { ...held.sluiceHeaders }, lateAnswerMs });
  const started = Date.now();
  const journey = (async () => {
    await g.next();
    const reply = replyOf(c, scope, started);
    if (reply) return settleReply(g, held, reply);
    await held.abandon("stopped by sluice");
    g.settled();
    return c.res;
  })();
  // the call's trip and its settling are work after the response too: a client that closes its
  // stream (the 2026-07-28 revision's cancel) or goes away does not stop the server's answer
  // from being awaited and kept
  scope.defer(journey.then(noop, noop));
  return journey;
}

const noop = (): void => undefined;

/** A request with another body (its length recomputed). */
export function withBody(request: Request, body: string | Uint8Array): Request {
  const headers = new Headers(request.headers);
  headers.delete("content-length");
  return new Request(request.url, { method: request.method, headers, body });
}

/** What the server did: the gateway's reply, or in an app the handler's response. None: sluice stopped the call itself. */
function replyOf(
  c: Context<SluiceEnv>,
  scope: Scope,
  started: number,
): (OriginReply & { latencyMs: number }) | undefined {
  if (scope.diverted) return scope.diverted;
  if (scope.target) return scope.reply;
  if (c.error instanceof Problem) return undefined;
  return { response: c.res, outcome: "answered", sent: c.req.raw.headers, latencyMs: Date.now() - started };
}

type Reply = OriginReply & { latencyMs?: number };

/** The claim's outcome from the server's reply, and the client's answer. */
async function settleReply(g: GuardedCall, held: Claim, reply: Reply): Promise<Response> {
  const { scope, call } = g;
  const res = reply.response;
  const done = (work: Promise<unknown>) => scope.defer(work.then(g.settled, g.settled));
  if (reply.outcome === "answered" && res.status >= 200 && res.status < 300) {
    const [toClient, toRead] = res.body ? res.body.tee() : [null, null];
    const settling = answerOf(res, toRead, call.id).then((answer) => settleAnswer(held, reply, answer));
    // an event stream goes to the client as it comes; a JSON answer too (read here from its copy)
    done(settling);
    return new Response(toClient, res);
  }
  if (reply.outcome === "answered" && res.status < 500) {
    // the server refused the message (a session gone, a bad request): the tool did not run
    await held.abandon("refused by the server");
    g.settled();
    return res;
  }
  if (reply.outcome === "timeout" && reply.late) {
    const late = reply.late.then((r) => (r ? resultResponse(r, call.id) : undefined));
    done(settleOnce(held, { ...reply, late }));
    return unknownOutcome(call.id, call.tool, true);
  }
  done(settleOnce(held, reply));
  if (reply.outcome === "answered") return res;
  return reply.outcome === "unreachable" ? notSent(call.id, call.tool) : unknownOutcome(call.id, call.tool, false);
}

/** Settles the claim with `reply`, the response it hands back (a copy of what is stored) discarded. */
async function settleOnce(held: Claim, reply: Reply): Promise<void> {
  const copy = await held.settleWith({ reply });
  // the answer is stored by now: a copy that cannot be cancelled (already closed) loses nothing
  await discardBody(copy.body);
}

/**
 * The server's answer found (or not) in its body: a result is stored, as the JSON-RPC response;
 * a JSON-RPC error releases the call (a protocol failure: the tool did not run); nothing found
 * (the body broke off, or ended without it) leaves the outcome unknown: indeterminate.
 */
async function settleAnswer(held: Claim, reply: Reply, answer: RpcResponse | undefined): Promise<void> {
  if (answer?.error) return held.abandon("a JSON-RPC error: the tool did not run");
  if (!answer) return settleOnce(held, { ...reply, outcome: "broken" });
  return settleOnce(held, { ...reply, response: stored(answer) });
}

/** A result as the claim stores it: the JSON-RPC response, `application/json`. */
function stored(answer: RpcResponse): Response {
  return new Response(responseText(answer), { status: 200, headers: { "content-type": "application/json" } });
}

/**
 * A late answer (after the client's timeout) as the claim settles it: its result stored, a
 * JSON-RPC error or a refusal of the message as a failure the route's `on_origin_error` releases
 * (a 502 of sluice's), an answer without the response as no answer (undefined: unknown).
 */
async function resultResponse(res: Response, id: RpcId): Promise<Response | undefined> {
  if (res.status >= 500) return res;
  if (res.status >= 300) {
    // the body is refused unread: a stream already closed has nothing left to free
    await discardBody(res.body);
    return new Response(null, { status: 502 });
  }
  const answer = await answerOf(res, res.body, id);
  if (!answer) return undefined;
  return answer.error ? new Response(null, { status: 502 }) : stored(answer);
}
