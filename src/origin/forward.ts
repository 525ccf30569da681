import { problem } from "../problem.js";
import { PROBLEMS, type ProblemKind } from "../problem-types.js";
import { METHOD_OVERRIDE_HEADERS } from "../routing/method.js";
import { discardBody, redact } from "../util/log.js";

/**
 * Headers never forwarded. Hop-by-hop ones (RFC 9110 §7.6.1) are for one connection only.
 * `expect` is answered by the client's own connection: forwarded, it makes the origin send an
 * interim `100 Continue`, which is not a final answer and cannot be relayed as one.
 */
const NOT_FORWARDED = [
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "host",
  "expect",
];

/**
 * How long after a timeout (the client has its 504) sluice keeps waiting for the origin's answer,
 * for a guard that must learn what the origin did: an idempotency claim stores it for the retries,
 * a session lock is held until it comes. Workers give `ctx.waitUntil` 30 s after the response; 5 s
 * of those are left for storing the answer. No answer by then: the outcome is unknown.
 */
export const LATE_ANSWER_MS = 25_000;

export interface ForwardTarget {
  origin: URL;
  /** The normalised path (see `normalisePath`): the origin sees the path sluice limited. */
  path: string;
  /** The trusted client address, from `CF-Connecting-IP`. */
  clientIp: string;
  /** The route's `origin_timeout`: past it the client gets a 504 problem. */
  timeoutMs?: number;
  /**
   * Past `timeoutMs`, keep the origin's request alive this much longer instead of aborting it, for
   * a caller that must learn what the origin did (an idempotency claim): the reply's `late`.
   */
  lateAnswerMs?: number;
  /** Headers sluice itself tells the origin (`Sluice-Job-Id`, ...), set after client ones are dropped. */
  sluiceHeaders?: Record<string, string>;
  /** The configuration's `problem_base`, for the 502/504 problems sent in the origin's place. */
  problemBase?: string;
  /** The route honours the request's method-override header: forward it (by default it is stripped). */
  methodOverride?: boolean;
}

/**
 * How a trip to the origin ended, which is what idempotency and the breaker must tell apart:
 * - `answered`: a final response (any status 200-599), relayed.
 * - `unreachable`: the request was never sent (fetch refused it before any connection): the
 *   origin certainly did not run it.
 * - `broken`: the connection failed without an answer. workerd's fetch reports a refused
 *   connection and one the origin dropped after reading the request alike ("Network connection
 *   lost."), so the origin may have run it: the outcome is unknown.
 * - `timeout`: no answer within `origin_timeout`: the origin may or may not have run it (its
 *   answer may still come: `late`).
 * - `unrelayable`: the origin answered, but with something that is not a final response (an
 *   interim 1xx): it may well have run the request, so this is never "nothing happened".
 */
export type OriginOutcome = "answered" | "unreachable" | "broken" | "timeout" | "unrelayable";

export interface OriginReply {
  response: Response;
  outcome: OriginOutcome;
  /** The headers the origin was sent (what its `Vary` refers to). */
  sent: Headers;
  /**
   * A `timeout` with `lateAnswerMs`: the origin's answer when it comes within that bound, else
   * undefined (no answer, or the connection broke). Never rejects.
   */
  late?: Promise<Response | undefined>;
  /** When (epoch ms) the request's body had been sent in full; absent without a body or when it never was. */
  bodySentAt?: number;
}

/** Whether the origin's part in a reply counts as a failure (for breakers and retries): no answer, or a 5xx. */
export function originFailed(reply: OriginReply): boolean {
  return reply.outcome !== "unrelayable" && (reply.outcome !== "answered" || reply.response.status >= 500);
}

/**
 * Whether the origin certainly did not act on the request: it was never sent, or it answered and
 * its answer says it failed (a 5xx). Only then may an idempotency claim be given back.
 */
export function originDidNotAct(reply: OriginReply): boolean {
  return reply.outcome === "unreachable" || (reply.outcome === "answered" && reply.response.status >= 500);
}

/**
 * Whether the origin may have acted without an answer that says what it did: a connection broken
 * without an answer, no answer in time (with no late one), an interim 1xx only.
 */
export function outcomeUnknown(reply: OriginReply): boolean {
  return reply.outcome === "broken" || reply.outcome === "timeout" || reply.outcome === "unrelayable";
}

/**
 * A timed-out reply once its late answer is in: `answered` with it when it came, else the same
 * `timeout` without a `late` (nothing more will come).
 */
export async function withLateAnswer(reply: OriginReply): Promise<OriginReply> {
  const late = reply.late ? await reply.late : undefined;
  if (!late) return { ...reply, late: undefined };
  return { outcome: "answered", sent: reply.sent, response: late };
}

/**
 * The URL and headers the origin gets for `request`. Headers a client could use to impersonate
 * sluice (`Sluice-*`) are removed, and the client-address headers are set from the trusted client
 * IP alone: `X-Forwarded-For`, `X-Real-IP`, `True-Client-IP` and `Forwarded` are overwritten,
 * never appended to or passed on as the client sent them. Also what a response's `Vary` is
 * evaluated against: the origin varies on the headers it received, not on the client's.
 */
export function originRequest(request: Request, target: ForwardTarget): { url: string; headers: Headers } {
  const incoming = new URL(request.url);
  const url = new URL(target.origin.href);
  url.pathname = joinPaths(target.origin.pathname, target.path);
  url.search = incoming.search;

  const headers = new Headers(request.headers);
  const named = (request.headers.get("connection") ?? "").split(",").map((h) => h.trim().toLowerCase());
  for (const h of [...NOT_FORWARDED, ...named]) if (h) headers.delete(h);
  for (const h of [...headers.keys()]) if (h.startsWith("sluice-")) headers.delete(h);
  // the origin must act on the method sluice decided on, not one a header asks for
  if (!target.methodOverride) for (const h of METHOD_OVERRIDE_HEADERS) headers.delete(h);
  for (const [h, v] of Object.entries(target.sluiceHeaders ?? {})) headers.set(h, v);
  const proto = incoming.protocol.replace(":", "");
  headers.set("x-forwarded-for", target.clientIp);
  headers.set("x-real-ip", target.clientIp);
  headers.set("true-client-ip", target.clientIp);
  headers.set("x-forwarded-proto", proto);
  headers.set("x-forwarded-host", incoming.host);
  headers.set("forwarded", `for=${forwardedNode(target.clientIp)};host="${incoming.host}";proto=${proto}`);
  return { url: url.href, headers };
}

/**
 * Sends an allowed request to the origin, body streamed, and says how it went. The response has
 * mutable headers; a failure to reach the origin is a 502 problem and a timeout a 504 problem,
 * never an exception.
 *
 * @example const { response, outcome } = await sendToOrigin(c.req.raw, { origin, path: "/api/x", clientIp: "203.0.113.9" });
 */
export async function sendToOrigin(request: Request, target: ForwardTarget): Promise<OriginReply> {
  const { url, headers } = originRequest(request, target);
  const hasBody = request.method !== "GET" && request.method !== "HEAD" && request.body !== null;
  const budget = target.timeoutMs ? target.timeoutMs + (target.lateAnswerMs ?? 0) : undefined;
  const signal = budget ? AbortSignal.timeout(budget) : undefined;
  const failed: Failed = (outcome, type, detail) => ({
    outcome,
    sent: headers,
    response: problem({ type, detail }, target.problemBase),
  });
  const upload: { sentAt?: number } = {};
  const body = hasBody && request.body ? timedBody(request.body, request.headers, upload) : null;
  // `duplex` is what Node's fetch requires of a streamed body (workerd streams without it)
  const init = { method: request.method, headers, body, redirect: "manual", signal, duplex: "half" };
  let sending: Promise<Response>;
  try {
    sending = fetch(url, init as RequestInit);
  } catch (e) {
    // the runtime's message may quote the URL, credentials and all: the client reads this detail
    return failed("unreachable", PROBLEMS.badGateway, `the request could not be sent: ${redact((e as Error).message)}`);
  }
  const res = await answerWithin(sending, target.timeoutMs);
  if (res === "timeout" || (res instanceof Error && signal?.aborted)) {
    const timedOut = failed(
      "timeout",
      PROBLEMS.gatewayTimeout,
      `the origin did not answer within ${target.timeoutMs} ms`,
    );
    if (!target.lateAnswerMs) return timedOut;
    return { ...timedOut, late: sending.then(relayable, () => undefined) };
  }
  if (res instanceof Error) {
    if (neverSent(res))
      return failed("unreachable", PROBLEMS.badGateway, `the request could not be sent: ${res.message}`);
    return failed("broken", PROBLEMS.badGateway, `the connection to the origin failed: ${res.message}`);
  }
  return answered(res, headers, failed, upload.sentAt);
}

/** Errors that prove nothing reached the origin. */
const NOT_SENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "ERR_INVALID_URL"]);

/**
 * Whether a fetch error proves the request never left: Node's fetch names a refused connection or
 * a failed lookup in its `cause`; a TypeError without one is fetch refusing its arguments. Anything
 * else (workerd's "Network connection lost." covers a refused connection too) may have been sent.
 */
function neverSent(e: Error): boolean {
  const code = (e.cause as { code?: unknown } | undefined)?.code;
  if (typeof code === "string") return NOT_SENT_CODES.has(code);
  return e instanceof TypeError && e.cause === undefined;
}

type Failed = (outcome: OriginOutcome, type: ProblemKind, detail: string) => OriginReply;

/** The origin's response within `timeoutMs` (without one: whenever it comes), "timeout", or what fetch threw. */
async function answerWithin(sending: Promise<Response>, timeoutMs?: number): Promise<Response | Error | "timeout"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<"timeout">((resolve) => {
    if (timeoutMs) timer = setTimeout(() => resolve("timeout"), timeoutMs);
  });
  try {
    return await Promise.race([
      sending.catch((e: unknown) => (e instanceof Error ? e : new Error(String(e)))),
      expired,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The origin's response as sluice relays it: a copy with mutable headers and none of `Sluice-*`.
 * Those are sluice's to say (`Sluice-Decision`, `Sluice-Region`, `Sluice-Delay-Ms`); an origin
 * passing an upstream's headers through (an image proxy, another sluice) must not say them for
 * it, nor make sluice believe them.
 */
export function withoutSluiceHeaders(res: Response): Response {
  const copy = new Response(res.body, res);
  for (const h of [...copy.headers.keys()]) if (h.startsWith("sluice-")) copy.headers.delete(h);
  return copy;
}

/** A late answer that can be kept: a final response; an interim one is none. */
async function relayable(res: Response): Promise<Response | undefined> {
  if (res.status >= 200) return withoutSluiceHeaders(res);
  await discardBody(res.body);
  return undefined;
}

/** The origin answered: a final response is relayed; an interim one (1xx) cannot be. */
async function answered(
  res: Response,
  headers: Headers,
  failed: Failed,
  bodySentAt: number | undefined,
): Promise<OriginReply> {
  // From here on the origin has answered: whatever goes wrong, it may have acted on the request.
  if (res.status < 200) {
    await discardBody(res.body);
    return failed(
      "unrelayable",
      PROBLEMS.badGateway,
      `the origin answered with an interim ${res.status} and no final response`,
    );
  }
  const response = withoutSluiceHeaders(res);
  return { outcome: "answered", sent: headers, response, ...(bodySentAt !== undefined && { bodySentAt }) };
}

/**
 * The request body as the origin reads it, noting when its last byte went: the origin's latency is
 * measured from then, so a client that dribbles its body cannot pass its own slowness off as the
 * origin's. A declared length is kept (workerd's FixedLengthStream), so the origin still gets a
 * `Content-Length` and not a chunked body.
 */
function timedBody(body: ReadableStream, headers: Headers, upload: { sentAt?: number }): ReadableStream {
  const timed = body.pipeThrough(new TransformStream({ flush: () => void (upload.sentAt = Date.now()) }));
  const length = Number(headers.get("content-length") ?? NaN);
  if (typeof FixedLengthStream !== "function" || !Number.isSafeInteger(length) || length < 0) return timed;
  return timed.pipeThrough(new FixedLengthStream(length));
}

/** A node of the `Forwarded` header (RFC 7239): IPv6 addresses are bracketed and quoted. */
function forwardedNode(ip: string): string {
  return ip.includes(":") ? `"[${ip}]"` : /^[\d.]+$/.test(ip) ? ip : `"${ip.replace(/["\\]/g, "")}"`;
}

/** `base` and `path` joined with one slash between them (the origin's path prefix kept). */
export function joinPaths(base: string, path: string): string {
  return base.endsWith("/") ? base.slice(0, -1) + path : base + path;
}
