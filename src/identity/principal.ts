import { hashIdentifier } from "./hash.js";
import type { Context } from "hono";
import { headerValue, identify, ipIdentity, readPart, spelled, type RequestFacts } from "./identify.js";
import { Problem } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";

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
 * retry meets the first call's claim; a token whose signature does not verify never names a `sub`.
 * Nor does the key set: a JWT whose signature cannot be checked at all just now (`unverifiable`:
 * the issuer's keys could not be fetched) names no principal, a 503 problem with `Retry-After`,
 * since the isolate that can check it would name its `sub` and this one the header's hash, and a
 * retry would meet neither's claim. Only answers that come out the same on every isolate name a
 * principal: the `sub` of a token that verifies, the hash of a header that is no JWT or whose
 * signature verifiably fails against the keys held. Agents' egress addresses rotate; their credentials do
 * not. The JWT and IP forms are spelled as `principal = "jwt:sub"` and `"ip"` are, so moving
 * between them keeps the keys; the header is hashed here so that no credential is held, logged
 * or hashed into a key in the clear.
 */
export async function autoPrincipal(facts: RequestFacts): Promise<string> {
  const sub = readPart("jwt:sub", facts) ?? readPart("jwt:sub", { ...facts, claims: facts.signedClaims });
  if (sub !== undefined) return spelled([["jwt:sub", sub]]);
  if (facts.unverifiable !== undefined) throw identityUnavailable(facts.unverifiable);
  const authorization = headerValue(facts.headers, "authorization");
  if (authorization !== undefined) return spelled([["authorization:sha256", await hashIdentifier(authorization)]]);
  return ipIdentity(facts.ip);
}

/** An `auto` principal that cannot be named just now: the request is not run rather than filed under another. */
function identityUnavailable(why: string): Problem {
  return new Problem({
    type: PROBLEMS.identityUnavailable,
    detail: `the bearer token names the caller, but its signature cannot be checked just now (${why}); nothing was run`,
    headers: { "Retry-After": "1" },
  });
}
