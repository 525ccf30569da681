/** What a limit's key parts are read from; built once per request. */
export interface RequestFacts {
  /** From `CF-Connecting-IP`, the only client address Cloudflare vouches for. */
  ip: string;
  matchPath: string;
  headers: Headers;
  url: URL;
}

/**
 * The identifier of one bucket, before hashing: the key parts and their values. A part the
 * request does not carry falls back to the client IP, tagged as such, so that leaving out a
 * header never escapes a limit and never shares a bucket with a header whose value is an IP.
 *
 * @example identify(["ip", "path"], facts) // '[["ip","203.0.113.9"],["path","/api/x"]]'
 */
export function identify(parts: readonly string[], facts: RequestFacts): string {
  return JSON.stringify(parts.map((part) => {
    const value = readPart(part, facts);
    return value === undefined ? [part, "missing->ip", facts.ip] : [part, value];
  }));
}

function readPart(part: string, facts: RequestFacts): string | undefined {
  if (part === "ip") return facts.ip;
  if (part === "global") return "*";
  if (part === "path") return facts.matchPath;
  const colon = part.indexOf(":");
  const source = part.slice(0, colon);
  const name = part.slice(colon + 1);
  if (source === "header") return facts.headers.get(name) ?? undefined;
  if (source === "query") return facts.url.searchParams.get(name) ?? undefined;
  if (source === "cookie") return readCookie(facts.headers.get("cookie"), name);
  return undefined;
}

function readCookie(header: string | null, name: string): string | undefined {
  if (!header) return undefined;
  for (const pair of header.split(";")) {
    const eq = pair.indexOf("=");
    if (eq > 0 && pair.slice(0, eq).trim() === name) return pair.slice(eq + 1).trim();
  }
  return undefined;
}

/** `CF-Connecting-IP` or, where Cloudflare did not set it (a bare local fetch), one shared identity. */
export function clientIp(headers: Headers): string {
  return headers.get("cf-connecting-ip")?.trim() || "unknown";
}
