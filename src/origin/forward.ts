import { problem } from "../problem.js";

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

export interface ForwardTarget {
  origin: URL;
  /** The normalised path (see `normalisePath`): the origin sees the path sluice limited. */
  path: string;
  /** The trusted client address, from `CF-Connecting-IP`. */
  clientIp: string;
  /** The route's `origin_timeout`: past it the request is abandoned with a 504 problem. */
  timeoutMs?: number;
  /** Headers sluice itself tells the origin (`Sluice-Job-Id`, ...), set after client ones are dropped. */
  sluiceHeaders?: Record<string, string>;
  /** The configuration's `problem_base`, for the 502/504 problems sent in the origin's place. */
  problemBase?: string;
}

/**
 * How a trip to the origin ended, which is what idempotency and the breaker must tell apart:
 * - `answered`: a final response (any status 200-599), relayed.
 * - `unreachable`: no answer at all (connection refused, DNS): the origin never ran the request.
 * - `timeout`: no answer within `origin_timeout`: the origin may or may not have run it.
 * - `unrelayable`: the origin answered, but with something that is not a final response (an
 *   interim 1xx): it may well have run the request, so this is never "nothing happened".
 */
export type OriginOutcome = "answered" | "unreachable" | "timeout" | "unrelayable";

export interface OriginReply {
  response: Response;
  outcome: OriginOutcome;
  /** The headers the origin was sent (what its `Vary` refers to). */
  sent: Headers;
  /** When (epoch ms) the request's body had been sent in full; absent without a body or when it never was. */
  bodySentAt?: number;
}

/** Whether the origin's part in a reply counts as a failure (for breakers and retries): no answer, or a 5xx. */
export function originFailed(reply: OriginReply): boolean {
  return (
    reply.outcome === "unreachable" ||
    reply.outcome === "timeout" ||
    (reply.outcome === "answered" && reply.response.status >= 500)
  );
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
  const signal = target.timeoutMs ? AbortSignal.timeout(target.timeoutMs) : undefined;
  const failed = (outcome: OriginOutcome, status: number, title: string, detail: string): OriginReply => ({
    outcome,
    sent: headers,
    response: problem({ status, title, detail }, target.problemBase),
  });
  let res: Response;
  const upload: { sentAt?: number } = {};
  try {
    const body = hasBody && request.body ? timedBody(request.body, request.headers, upload) : null;
    // `duplex` is what Node's fetch requires of a streamed body (workerd streams without it)
    const init = { method: request.method, headers, body, redirect: "manual", signal, duplex: "half" };
    res = await fetch(url, init as RequestInit);
  } catch (e) {
    if (signal?.aborted) {
      return failed("timeout", 504, "Gateway timeout", `the origin did not answer within ${target.timeoutMs} ms`);
    }
    const reason = e instanceof Error ? e.message : String(e);
    return failed("unreachable", 502, "Bad gateway", `the origin could not be reached: ${reason}`);
  }
  // From here on the origin has answered: whatever goes wrong, it may have acted on the request.
  if (res.status < 200) {
    await res.body?.cancel().catch(() => undefined);
    return failed(
      "unrelayable",
      502,
      "Bad gateway",
      `the origin answered with an interim ${res.status} and no final response`,
    );
  }
  const response = new Response(res.body, res);
  return {
    outcome: "answered",
    sent: headers,
    response,
    ...(upload.sentAt !== undefined && { bodySentAt: upload.sentAt }),
  };
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

function joinPaths(base: string, path: string): string {
  return base.endsWith("/") ? base.slice(0, -1) + path : base + path;
}
