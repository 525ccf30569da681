import type { Context } from "hono";
import type { Route } from "../../config/index.js";
import type { Scope } from "../../context.js";
import { usesJwt } from "../../config/uses-jwt.js";
import { verifyBearer, type Verified } from "../../keys/jwt.js";
import { AUTO_PRINCIPAL } from "../../keys/principal.js";
import { Problem } from "../../problem.js";
import { limitedRoute } from "../../routing/route.js";
import type { Step } from "../step.js";

/**
 * The request's bearer token, verified once per request (the lists and the route's own claims
 * ask the same question): with the `jwt` settings and the HMAC key in the Worker's `secret_env`.
 */
export function verifiedBearer(c: Context, scope: Scope): Promise<Verified> {
  scope.bearer ??= verifyBearer(c.req.raw, scope.config.jwt, jwtSecret(scope), scope.runtime.jwks);
  return scope.bearer;
}

/** The HMAC key tokens are verified with: the Worker's variable named by `jwt.secret_env`. */
export function jwtSecret(scope: Pick<Scope, "config" | "env">): unknown {
  return (scope.env as unknown as Record<string, unknown>)[scope.config.jwt?.secret_env ?? "SLUICE_JWT_SECRET"];
}

/**
 * Verifies the bearer token of a request whose route reads JWT claims (limits, tiers, session or
 * idempotency principals): a token that does not verify is a 401, never a silent fallback to
 * another identity; no token means no claims. The claims go to the request's facts. Where the
 * deployment has a `jwt` table and the route's only reader of claims is an `auto` principal, the
 * token is verified too, but one that does not verify leaves the principal to the next rule.
 */
export const verifyJwtStep: Step = async (c, scope, next) => {
  const route = scope.route;
  // claims already verified (verifyJwt(), hono's jwt() middleware, or the lists) stand
  if (!route || scope.facts.claims) return next();
  if (usesJwt(limitedRoute(scope, route)) && !scope.allowListed) {
    const verified = await verifiedBearer(c, scope);
    if (!verified.ok) {
      throw new Problem({
        status: 401,
        title: "Invalid token",
        detail: verified.detail,
        headers: { "WWW-Authenticate": 'Bearer error="invalid_token"' },
      });
    }
    scope.facts.claims = verified.claims;
  } else if (scope.config.jwt && followsCaller(route, scope.method)) {
    // nothing here reads claims but `auto`, which falls back to the Authorization header's hash:
    // a token that does not verify is the origin's to refuse, and names no one else's principal
    const verified = await verifiedBearer(c, scope);
    if (verified.ok) scope.facts.claims = verified.claims;
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
