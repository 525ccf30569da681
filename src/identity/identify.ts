import type { Context } from "hono";
import { ownValue } from "../util/own.js";

/** What a limit's key parts are read from; built once per request. */
export interface RequestFacts {
  /** From `CF-Connecting-IP`, the only client address Cloudflare vouches for. */
  ip: string;
  matchPath: string;
  headers: Headers;
  url: URL;
  /** The claims of the request's verified JWT, when a route keys on one and it carried one. */
  claims?: Record<string, unknown>;
  /**
   * The claims of a bearer token whose signature, issuer and audience verified but whose time
   * claims refused it (expired, not yet valid): who the caller is, for an `auto` principal, never
   * a key part or an admission.
   */
  signedClaims?: Record<string, unknown>;
  /**
   * Why the bearer token's signature could not be checked at all just now (the issuer's key set
   * could not be fetched, or lacks the token's key id and cannot be fetched again yet): the token
   * may well be a caller's whose `sub` is its `auto` principal, so no other principal may be taken
   * for it (src/identity/principal.ts).
   */
  unverifiable?: string;
  /** The request's Hono context, in an app (what a key function of the app's code reads). */
  context?: Context;
  /** The identifier the app's code gave (a key function's result, `limiter().limit()`'s identifier). */
  code?: string;
  /** The MCP tool a `tools/call` names (src/features/mcp/): the key part "tool". */
  tool?: string;
  /** The cost the app's code gave (`limiter().limit(c, id, { cost })`), over every limit's own. */
  cost?: number;
}

/**
 * What a limit's key parts can be read from, whoever asks: a request's facts, or a caller that is
 * no request at all (`limiter().limit(c, identifier)`, a tool call) and names itself by an
 * identifier alone: it has no path, headers or URL, and a part read from them is missing.
 */
export type IdentityFacts = Omit<RequestFacts, "matchPath" | "headers" | "url"> &
  Partial<Pick<RequestFacts, "matchPath" | "headers" | "url">>;

/**
 * The facts of a caller that names itself by an identifier (and, it may be, a cost): the key part
 * `code` is the identifier; no request is read, so no address either.
 *
 * @example identifierFacts("user-7", 3) // { ip: "", code: "user-7", cost: 3 }
 */
export function identifierFacts(identifier: string, cost?: number): IdentityFacts {
  return { ip: "", code: identifier, ...(cost !== undefined ? { cost } : {}) };
}

/** The key part of an identifier from the app's own code: only sluice sets it, never a configuration. */
export const CODE_PART = "code";

/** The identifier of a bucket, or what to do when the request does not carry the identity. */
export type Identity = { kind: "id"; id: string } | { kind: "skip" } | { kind: "missing"; part: string };

/**
 * The identifier of one bucket, before hashing: the key parts and their values. A part the
 * request does not carry is handled as the limit's `missing` says: `ip` falls back to the client
 * IP, tagged, so that leaving out a header never escapes a limit and never shares a bucket with a
 * header whose value is an IP; `skip` skips the limit; `reject` refuses the request.
 *
 * @example identify(["ip", "path"], facts, "ip") // { kind: "id", id: '[["ip","203.0.113.9"],["path","/api/x"]]' }
 */
export function identify(
  parts: readonly string[],
  facts: IdentityFacts,
  missing: "ip" | "reject" | "skip" = "ip",
): Identity {
  const values: string[][] = [];
  for (const part of parts) {
    const value = readPart(part, facts);
    if (value !== undefined) values.push([part, value]);
    else if (missing === "ip") values.push([part, "missing->ip", facts.ip]);
    else return missing === "skip" ? { kind: "skip" } : { kind: "missing", part };
  }
  return { kind: "id", id: spelled(values) };
}

/**
 * An identity in its one spelling: its key parts and their values, as JSON pairs. Every identity
 * that reaches a hash is spelled here, so that one client named two ways (a limit keyed on `ip`, an
 * `auto` principal falling back to the IP) is one bucket, one principal, one client.
 *
 * @example spelled([["jwt:sub", "alice"]]) // '[["jwt:sub","alice"]]'
 */
export function spelled(values: ReadonlyArray<readonly string[]>): string {
  return JSON.stringify(values);
}

/** The identity of the client by its address alone: as a limit keyed on `ip` names it. */
export function ipIdentity(ip: string): string {
  return spelled([["ip", ip]]);
}

/** The value of one key part in this request, or `undefined` when the request does not carry it. */
export function readPart(part: string, facts: IdentityFacts): string | undefined {
  if (part === "ip") return facts.ip;
  if (part === "global") return "*";
  if (part === "path") return facts.matchPath;
  if (part === CODE_PART) return facts.code;
  if (part === "tool") return facts.tool;
  const colon = part.indexOf(":");
  const source = part.slice(0, colon);
  const name = part.slice(colon + 1);
  if (source === "header") return facts.headers && headerValue(facts.headers, name);
  if (source === "query") return facts.url?.searchParams.get(name) ?? undefined;
  if (source === "cookie") return readCookie(facts.headers?.get("cookie") ?? null, name);
  if (source === "jwt") return claimText(ownValue(facts.claims, name));
  return undefined;
}

/**
 * A header's value without its surrounding HTTP whitespace (RFC 9110 §5.5: spaces and tabs are not
 * part of a field value), so `k1` and `k1\t` are one client; blank is the same as absent. Not every
 * HTTP stack strips it before the Worker sees the request.
 */
export function headerValue(headers: Headers, name: string): string | undefined {
  const v = headers.get(name);
  return v === null ? undefined : trimHttpWhitespace(v) || undefined;
}

export function trimHttpWhitespace(text: string): string {
  return text.replace(/^[ \t]+|[ \t]+$/g, "");
}

/** A claim's value as a key part reads it: a string as it is, anything else as its JSON. */
export function claimText(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  return typeof v === "string" ? v : JSON.stringify(v);
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
  return headerValue(headers, "cf-connecting-ip") ?? "unknown";
}
