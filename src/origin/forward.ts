import { problem } from "../shed/problem.js";

/** Hop-by-hop headers (RFC 9110 §7.6.1) are for one connection only and never forwarded. */
const HOP_BY_HOP = ["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"];

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
}

/**
 * Sends an allowed request to the origin, body streamed, and returns the origin's response with
 * mutable headers. Headers a client could use to impersonate sluice (`Sluice-*`) are removed, and
 * `X-Forwarded-For` is set to the trusted client IP alone, not appended to what the client sent.
 * A network failure becomes a 502 problem and a timeout a 504 problem, never an exception.
 *
 * @example const res = await forward(c.req.raw, { origin, path: "/api/x", clientIp: "203.0.113.9" });
 */
export async function forward(request: Request, target: ForwardTarget): Promise<Response> {
  const incoming = new URL(request.url);
  const url = new URL(target.origin.href);
  url.pathname = joinPaths(target.origin.pathname, target.path);
  url.search = incoming.search;

  const headers = new Headers(request.headers);
  const named = (request.headers.get("connection") ?? "").split(",").map((h) => h.trim().toLowerCase());
  for (const h of [...HOP_BY_HOP, ...named]) if (h) headers.delete(h);
  for (const h of [...headers.keys()]) if (h.startsWith("sluice-")) headers.delete(h);
  for (const [h, v] of Object.entries(target.sluiceHeaders ?? {})) headers.set(h, v);
  headers.set("x-forwarded-for", target.clientIp);
  headers.set("x-forwarded-proto", incoming.protocol.replace(":", ""));
  headers.set("x-forwarded-host", incoming.host);

  const hasBody = request.method !== "GET" && request.method !== "HEAD" && request.body !== null;
  const signal = target.timeoutMs ? AbortSignal.timeout(target.timeoutMs) : undefined;
  try {
    const res = await fetch(url.href, { method: request.method, headers, body: hasBody ? request.body : null, redirect: "manual", signal });
    return new Response(res.body, res);
  } catch (e) {
    if (signal?.aborted) {
      return problem({ status: 504, title: "Gateway timeout", detail: `the origin did not answer within ${target.timeoutMs} ms` });
    }
    return problem({
      status: 502,
      title: "Bad gateway",
      detail: `the origin could not be reached: ${e instanceof Error ? e.message : String(e)}`,
    });
  }
}

function joinPaths(base: string, path: string): string {
  return base.endsWith("/") ? base.slice(0, -1) + path : base + path;
}
