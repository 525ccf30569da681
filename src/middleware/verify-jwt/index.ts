import type { Route } from "../../config/index.js";
import type { Scope } from "../../context.js";
import { usesJwt, verifyBearer } from "../../keys/jwt.js";
import { Problem } from "../../problem.js";
import type { Step } from "../step.js";

/** The route whose limits a request is decided against: its own, or the one a peek route names. */
export function limitedRoute(scope: Pick<Scope, "config">, route: Route): Route {
  return typeof route.peek === "string" ? (scope.config.routes.find((r) => r.name === route.peek) ?? route) : route;
}

/**
 * Verifies the bearer token of a request whose route reads JWT claims (limits, tiers, session or
 * idempotency principals): a token that does not verify is a 401, never a silent fallback to
 * another identity; no token means no claims. The claims go to the request's facts.
 */
export const verifyJwtStep: Step = async (c, scope, next) => {
  const route = scope.route;
  // claims already verified (verifyJwt(), or hono's jwt() middleware, before this one) stand
  if (route && usesJwt(limitedRoute(scope, route)) && !scope.allowListed && !scope.facts.claims) {
    const settings = scope.config.jwt;
    const secret = (scope.env as unknown as Record<string, unknown>)[settings?.secret_env ?? "SLUICE_JWT_SECRET"];
    const verified = await verifyBearer(c.req.raw, settings, secret, scope.runtime.jwks);
    if (!verified.ok) {
      throw new Problem({
        status: 401,
        title: "Invalid token",
        detail: verified.detail,
        headers: { "WWW-Authenticate": 'Bearer error="invalid_token"' },
      });
    }
    scope.facts.claims = verified.claims;
  }
  await next();
};
