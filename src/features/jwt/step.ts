import type { Context } from "hono";
import type { Config, Route } from "../../config/index.js";
import type { Scope, Step } from "../../context.js";
import { usesJwt } from "../../config/uses-jwt.js";
import { JwksCache, statedClaims, verifyBearer, type Verified } from "./jwt.js";
import { AUTO_PRINCIPAL } from "../../identity/principal.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { limitedRoute } from "../../routing/route.js";
import { logFailure } from "../../util/log.js";

/** What verifying a request's bearer token needs: the `jwt` settings, the key's variable, the JWKS cache. */
export type Verifier = Pick<Scope, "config" | "env" | "runtime">;

/**
 * Each request's verification, the JWT capability's own result: kept by the request's scope (a
 * mount's, so two sluice middleware with other `jwt` settings never share one), never written into it.
 */
const verifications = new WeakMap<Verifier, Promise<Verified>>();

/**
 * The request's bearer token, verified once per request (the lists and the route's own claims
 * ask the same question): with the `jwt` settings and the HMAC key in the Worker's `secret_env`.
 */
export function verifiedBearer(c: Context, scope: Verifier, secret = jwtSecret(scope)): Promise<Verified> {
  let verified = verifications.get(scope);
  if (!verified)
    verifications.set(
      scope,
      (verified = verifyBearer(c.req.raw, scope.config.jwt, secret, scope.runtime.own(JwksCache))),
    );
  return verified;
}

/** How `bearerClaims` treats a request: whether a token is required, the key, and the thrower's `problem_base`. */
export interface ClaimsRule {
  required?: boolean;
  secret?: unknown;
  problemBase?: string;
}

/**
 * The verified claims of the request's bearer token: a token that does not verify is a 401
 * problem, and so is none when one is `required`; otherwise no token means no claims.
 */
export async function bearerClaims(
  c: Context,
  verifier: Verifier,
  rule: ClaimsRule = {},
): Promise<Record<string, unknown> | undefined> {
  const verified = await verifiedBearer(c, verifier, rule.secret ?? jwtSecret(verifier));
  if (!verified.ok) throw invalidToken(verified.detail, rule.problemBase);
  if (!verified.claims && rule.required) throw invalidToken("a bearer token is required", rule.problemBase);
  return verified.claims;
}

function invalidToken(detail: string, problemBase: string | undefined): Problem {
  const init = {
    type: PROBLEMS.invalidToken,
    detail,
    headers: { "WWW-Authenticate": 'Bearer error="invalid_token"' },
  };
  return new Problem(init, "reject", problemBase);
}

/** The HMAC key tokens are verified with: the Worker's variable named by `jwt.secret_env`. */
export function jwtSecret(scope: Pick<Scope, "config" | "env">): unknown {
  return (scope.env as unknown as Record<string, unknown>)[scope.config.jwt?.secret_env ?? "SLUICE_JWT_SECRET"];
}

/**
 * The request's claims for the deny and allow lists (the access step's `claimsOf`, handed to it
 * where the steps are composed): verified ones go to its facts (allow and deny entries match them,
 * and the route's own steps reuse them). A token that does not verify gives only the claims it
 * states, which deny entries alone match: a banned client's expired or re-signed token keeps it
 * banned, while no forged claim can put a client on the allow list. Its 401 is the route's to give.
 */
export async function claimsForLists(c: Context, scope: Scope): Promise<Record<string, unknown> | undefined> {
  if (scope.facts.claims) return undefined;
  const verified = await verifiedBearer(c, scope);
  if (verified.ok) {
    scope.facts.claims = verified.claims;
    return undefined;
  }
  warnUnverifiable(scope);
  return statedClaims(c.req.raw);
}

const warned = new WeakSet<Config>();

/** Once per configuration: `jwt:` entries but no key to verify tokens with (allow entries cannot match). */
function warnUnverifiable(scope: Scope): void {
  const settings = scope.config.jwt;
  const secret = jwtSecret(scope);
  if (settings?.jwks_url || (typeof secret === "string" && secret !== "") || warned.has(scope.config)) return;
  warned.add(scope.config);
  logFailure("lists_jwt_unverifiable", {
    detail: `the lists name JWT claims but there is no ${settings?.secret_env ?? "SLUICE_JWT_SECRET"} or jwt.jwks_url to verify tokens with: jwt: allow entries cannot match`,
  });
}

/**
 * Verifies the bearer token of a request whose route reads JWT claims (limits, tiers, session or
 * idempotency principals): a token that does not verify is a 401, never a silent fallback to
 * another identity; no token means no claims. The claims go to the request's facts. Where the
 * deployment has a `jwt` table and the route's only reader of claims is an `auto` principal, the
 * token is verified too, but one that does not verify leaves the principal to the next rule, unless
 * only its time claims refused it: its `sub` stays the principal. A token whose signature cannot
 * be checked just now (the key set unavailable) is neither: the principal cannot be named, and a
 * guarded request is a 503 (src/identity/principal.ts), never filed under the header's hash.
 */
export const verifyJwtStep: Step = async (c, scope, next) => {
  const route = scope.route;
  // claims already verified (verifyJwt(), hono's jwt() middleware, or the lists) stand
  if (!route || scope.facts.claims) return next();
  if (usesJwt(limitedRoute(scope, route)) && !scope.allowListed) {
    scope.facts.claims = await bearerClaims(c, scope);
  } else if (scope.config.jwt && followsCaller(route, scope.method)) {
    // nothing here reads claims but `auto`, which falls back to the Authorization header's hash:
    // a token that does not verify is the origin's to refuse, and names no one else's principal;
    // one refused only by its time claims is still its signer's `sub` (one token, one principal)
    const verified = await verifiedBearer(c, scope);
    if (verified.ok) scope.facts.claims = verified.claims;
    else if (verified.unavailable) scope.facts.unverifiable = verified.detail;
    else scope.facts.signedClaims = verified.signed;
  }
  await next();
};

/**
 * Whether this request's idempotency key or session lock belongs to an `auto` principal, which
 * is the verified JWT's sub where the deployment verifies JWTs (a `jwt` table).
 */
function followsCaller(route: Route, method: string): boolean {
  return [route.idempotency, route.session].some(
    (t) => t?.methods.includes(method) && t.principal.length === 1 && t.principal[0] === AUTO_PRINCIPAL,
  );
}

/**
 * With a `jwt` option the middleware verifies the bearer token itself (unless `verifyJwt()` or
 * hono's `jwt()` ran before), so that an `auto` or `jwt:` principal is the token's subject. Here,
 * beside the step, so that only the middleware that use it (idempotency(), session()) import the
 * JWT code: the package's shared chunks are split by module, and hono's JWT helpers, once
 * imported, stay in every Worker that loads their chunk.
 */
export function withJwt(config: Pick<Config, "jwt">, step: Step): Step[] {
  return config.jwt ? [verifyJwtStep, step] : [step];
}
