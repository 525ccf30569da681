/** The two views of one request path that the rest of sluice works with. */
export interface NormalPath {
  /** What is forwarded to the origin: canonical, but case and encoded slashes kept. */
  forward: string;
  /** What routes match and `path` keys hash: also case-folded, encoded slashes as separators, no trailing slash. */
  match: string;
}

export type NormaliseResult = { ok: true; path: NormalPath } | { ok: false; status: 400 | 414; detail: string };

export const MAX_PATH_LENGTH = 4096;

/** How paths are compared (the `paths` table): case, trailing slash, path parameters. */
export interface PathPolicy {
  case: "insensitive" | "sensitive";
  trailing_slash: "ignore" | "strict";
  /** strip: `;params` are cut from each segment for matching, as Tomcat and Spring do; reject: 400. */
  parameters: "strip" | "reject";
}

export const DEFAULT_PATH_POLICY: PathPolicy = { case: "insensitive", trailing_slash: "ignore", parameters: "strip" };

const UNRESERVED = /[A-Za-z0-9\-._~]/;
/** `;` or its escape: an origin that decodes before it strips parameters reads `%3B` as `;` too. */
const PARAMETER = /;|%3B/;

/**
 * Brings every spelling of a path to one form, so that `//api/x`, `/API/x`, `/api/./x`,
 * `/api/%78`, `/api/x/` and `/a/../api/x` all meet the same limit: unreserved characters are
 * percent-decoded, other escapes upper-cased, empty and dot segments resolved; the match view is
 * case-folded, loses its trailing slash unless the policy says otherwise, and loses each
 * segment's `;parameters`. Paths that no honest client sends (bad escapes, NUL) are refused rather
 * than guessed at.
 *
 * @example normalisePath("//API/./x/") // { ok: true, path: { forward: "/API/x/", match: "/api/x" } }
 * @example normalisePath("/public/..;/admin") // { ok: true, path: { forward: "/public/..;/admin", match: "/admin" } }
 */
export function normalisePath(raw: string, policy: PathPolicy = DEFAULT_PATH_POLICY): NormaliseResult {
  if (raw.length > MAX_PATH_LENGTH)
    return { ok: false, status: 414, detail: `path longer than ${MAX_PATH_LENGTH} characters` };
  const decoded = decodeUnreserved(raw.replaceAll("\\", "/"));
  if (!decoded.ok) return decoded;
  if (policy.parameters === "reject" && PARAMETER.test(decoded.text)) {
    return {
      ok: false,
      status: 400,
      detail: 'path contains ";" (path parameters are refused: paths.parameters = "reject")',
    };
  }
  const forwardSegments = resolveSegments(decoded.text.split("/"));
  const trailingSlash = forwardSegments.length > 0 && /\/\.{0,2}$/.test(decoded.text);
  const forward = "/" + forwardSegments.join("/") + (trailingSlash ? "/" : "");
  // The origin reads `forward`; many (Tomcat, Spring) drop each segment's `;parameters` before
  // resolving dot segments, so `/public/..;/admin` is their `/admin`: match what they will serve.
  const bare = forwardSegments.map(withoutParameters);
  // Encoded slashes are kept for the origin (they may be part of an id) but count as separators
  // for matching, so that an origin that decodes them cannot be reached around a limit.
  const joined = bare.join("/").replace(/%2F|%5C/g, "/");
  const matchSegments = resolveSegments((policy.case === "insensitive" ? joined.toLowerCase() : joined).split("/"));
  const keepSlash = policy.trailing_slash === "strict" && endsInSlash(trailingSlash, bare) && matchSegments.length > 0;
  return { ok: true, path: { forward, match: "/" + matchSegments.join("/") + (keepSlash ? "/" : "") } };
}

/** A segment without its path parameters: `x;v=1` is `x`, `..;` is `..`, `;jsessionid=1` is empty. */
function withoutParameters(segment: string): string {
  const at = segment.search(PARAMETER);
  return at < 0 ? segment : segment.slice(0, at);
}

/** Whether the path ends in a slash once parameters are gone (`/x/;p` and `/x/.;p` do). */
function endsInSlash(trailingSlash: boolean, bareSegments: string[]): boolean {
  const last = bareSegments[bareSegments.length - 1];
  return trailingSlash || (last !== undefined && /^\.{0,2}$/.test(last));
}

function decodeUnreserved(path: string): { ok: true; text: string } | { ok: false; status: 400; detail: string } {
  let out = "";
  for (let i = 0; i < path.length; i++) {
    const ch = path[i] as string;
    if (ch !== "%") {
      out += ch;
      continue;
    }
    const hex = path.slice(i + 1, i + 3);
    if (!/^[0-9A-Fa-f]{2}$/.test(hex))
      return { ok: false, status: 400, detail: `invalid percent-encoding at position ${i}` };
    const code = parseInt(hex, 16);
    if (code === 0) return { ok: false, status: 400, detail: "path contains an encoded NUL" };
    const char = String.fromCharCode(code);
    out += UNRESERVED.test(char) ? char : `%${hex.toUpperCase()}`;
    i += 2;
  }
  return { ok: true, text: out };
}

function resolveSegments(segments: string[]): string[] {
  const out: string[] = [];
  for (const s of segments) {
    if (s === "" || s === ".") continue;
    if (s === "..") out.pop();
    else out.push(s);
  }
  return out;
}
