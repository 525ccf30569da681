/**
 * `sluice/access`: the deny and allow lists, and JWT verification.
 *
 * @example
 * import { accessLists, verifyJwt } from "sluice/access";
 * app.use("*", verifyJwt(), accessLists());
 */
import type { MiddlewareHandler } from "hono";
import { plainConfigSchema } from "../config/settings.js";
import type { SluiceEnv } from "../context.js";
import type { Env } from "../env.js";
import { accessListsStep } from "../features/access/step.js";
import { bearerClaims, claimsForLists } from "../features/jwt/step.js";
import { isolateRuntime } from "../runtime.js";
import { compileOptions, standalone, type SharedOptions } from "./standalone.js";

export type { SluiceDecision, SluiceEnv, SluiceVariables, LimitState } from "../context.js";
export type { SharedOptions } from "./standalone.js";

/**
 * The deny and allow lists managed with the admin API: a denied client gets 403. While an entry
 * names a JWT claim it verifies the bearer token itself (the `jwt` settings and the Worker's
 * secret), unless `verifyJwt()` or hono's `jwt()` put verified claims on the context before it.
 */
export function accessLists(options: SharedOptions & { name?: string } = {}): MiddlewareHandler<SluiceEnv> {
  const config = compileOptions("accessLists", options, { name: options.name ?? "app" }, { schema: plainConfigSchema });
  return standalone(config, options, [accessListsStep(claimsForLists)], { by: "accessLists()", duties: ["lists"] });
}

export interface VerifyJwtOptions extends SharedOptions {
  /** The HMAC key; default: the Worker's variable named by `jwt.secret_env` (SLUICE_JWT_SECRET). */
  secret?: string;
  /** A request without a token is a 401 (default: it goes on without claims). */
  required?: boolean;
}

/**
 * Verifies the bearer token (HMAC secret, or `jwt.jwks_url`) and puts its claims in
 * `c.get("jwtPayload")`, where limits keyed on `jwt:<claim>` read them.
 */
export function verifyJwt(options: VerifyJwtOptions = {}): MiddlewareHandler<SluiceEnv> {
  const config = compileOptions("verifyJwt", options, { name: "app" }, { schema: plainConfigSchema });
  return async (c, next) => {
    const env = (c.env ?? {}) as Env;
    const verifier = { config, env, runtime: options.runtime ?? isolateRuntime() };
    // thrown to the app's own error handler, which knows no problem_base
    const rule = { required: options.required, secret: options.secret, problemBase: config.problem_base };
    const claims = await bearerClaims(c, verifier, rule);
    if (claims) c.set("jwtPayload" as never, claims as never);
    await next();
  };
}
