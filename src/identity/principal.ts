import { hashIdentifier } from "./hash.js";
import type { Context } from "hono";
import { headerValue, identify, readPart, type RequestFacts } from "./identify.js";

/** The principal that follows the caller's credential rather than its address (docs/idempotency-and-sessions.md, Idempotency: principals). */
export const AUTO_PRINCIPAL = "auto";

/**
 * Whose idempotency keys and session locks these are: the configured key parts (a part the
 * request lacks falls back to the IP; `fromCode`, the app's function, gives the part "code"), or for `auto` the caller's credential (see
 * {@link autoPrincipal}). The result only ever reaches Redis hashed.
 *
 * @example await principalOf(["header:x-user"], facts) // '[["header:x-user","u1"]]'
 */
export async function principalOf(
  parts: readonly string[],
  facts: RequestFacts,
  fromCode?: (c: Context) => string | undefined,
): Promise<string> {
  if (parts.length === 1 && parts[0] === AUTO_PRINCIPAL) return autoPrincipal(facts);
  // a function's principal is read as the part "code": `undefined` is a missing part (the IP, tagged)
  const read = fromCode && facts.context ? { ...facts, code: fromCode(facts.context) } : facts;
  const who = identify(parts, read, "ip");
  return who.kind === "id" ? who.id : facts.ip;
}

/**
 * `principal = "auto"`: the JWT's `sub` when the request's token was verified (the route verifies
 * JWTs, or `verifyJwt()` ran before), else a hash of the `Authorization` header when the request
 * has one, else the IP. A token whose signature, issuer and audience verified is its `sub`
 * whatever its time claims say (`signedClaims`): a token that expires during a slow call, or whose
 * `iat` is a second ahead of this isolate's clock, names the same principal on its retry, so the
 * retry meets the first call's claim; a token whose signature does not verify never names a `sub`. Agents' egress addresses rotate; their credentials do
 * not. The JWT and IP forms are spelled as `principal = "jwt:sub"` and `"ip"` are, so moving
 * between them keeps the keys; the header is hashed here so that no credential is held, logged
 * or hashed into a key in the clear.
 */
export async function autoPrincipal(facts: RequestFacts): Promise<string> {
  const sub = readPart("jwt:sub", facts) ?? readPart("jwt:sub", { ...facts, claims: facts.signedClaims });
  if (sub !== undefined) return JSON.stringify([["jwt:sub", sub]]);
  const authorization = headerValue(facts.headers, "authorization");
  if (authorization !== undefined)
    return JSON.stringify([["authorization:sha256", await hashIdentifier(authorization)]]);
  return JSON.stringify([["ip", facts.ip]]);
}
