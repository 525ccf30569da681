/**
 * sluice as middleware for a Hono app of your own.
 *
 * @example
 * import { Hono } from "hono";
 * import { rateLimit, idempotency } from "sluice";
 * const app = new Hono();
 * app.use("/api/*", rateLimit({ limits: [{ name: "per-ip", key: "ip", rate: 10, period: "1s", burst: 20 }] }));
 * app.post("/orders", idempotency({ required: true }), (c) => c.json({ created: true }, 201));
 */
import type { MiddlewareHandler } from "hono";
import { loadConfig, type Config } from "./config/index.js";
import type { SluiceInput } from "./config/schema.js";
import type { SluiceEnv } from "./context.js";
import type { Env } from "./env.js";
import { usesJwt } from "./config/uses-jwt.js";
import { accessListsStep } from "./features/access/step.js";
import { breakerStep } from "./features/breaker/step.js";
import { idempotencyStep } from "./features/idempotency/step.js";
import { rateLimitStep } from "./features/rate-limit/step.js";
import { sessionStep } from "./features/session/step.js";
import { compileOptions, SHARED_FIELDS, standalone, type SharedOptions } from "./middleware/standalone.js";
import type { Step } from "./middleware/step.js";
import { bearerClaims, verifyJwtStep } from "./features/jwt/step.js";
import { forwardToOrigin } from "./pipeline/forward.js";
import { PIPELINE_STEPS } from "./pipeline/steps.js";
import { isolateRuntime } from "./runtime.js";

export type { SharedOptions } from "./middleware/standalone.js";
export type { SluiceDecision, SluiceEnv, SluiceVariables, LimitState } from "./context.js";
export type { SluiceInput as SluiceConfig } from "./config/schema.js";
export { ConfigError } from "./config/index.js";
export { Problem } from "./problem.js";
export { Runtime } from "./runtime.js";
export { createApp } from "./pipeline/gateway.js";

type RouteInput = NonNullable<SluiceInput["routes"]>[number];
/** A limit, exactly as in `wrangler.toml`'s `[[vars.SLUICE.routes.limits]]`. */
export type LimitOptions = NonNullable<RouteInput["limits"]>[number];

export interface RateLimitOptions extends SharedOptions {
  limits: LimitOptions[];
  /** Names the buckets in Redis (`{key_prefix}:{name}:{limit}:{hash}`) and the metrics; default "app". */
  name?: string;
  /** Decide and count, never refuse (how a new limit is rolled out). */
  shadow?: boolean;
  /** Report the buckets without spending (a quota endpoint). */
  peek?: boolean;
  /** The requests' priority: a name, or `header:<name>` / `jwt:<claim>` holding one (docs/algorithms.md, Priorities). */
  priority?: RouteInput["priority"];
  /** An in-flight limit for the handlers after it that follows their latency (docs/algorithms.md, Adaptive limit). */
  adaptive?: RouteInput["adaptive"];
}

/**
 * Rate limits for the routes it is mounted on: every limit decided in one Redis call, all or
 * nothing; a refusal is a 429 problem with `Retry-After` and `RateLimit` headers; the handler
 * finds the decision in `c.get("sluice")`.
 */
export function rateLimit(options: RateLimitOptions): MiddlewareHandler<SluiceEnv> {
  const { limits, name = "app", shadow, peek, priority, adaptive } = options;
  const config = compileOptions("rateLimit", options, { name, limits, shadow, peek, priority, adaptive });
  const route = config.routes[0];
  // limits keyed on JWT claims verify the token themselves, unless verifyJwt() ran before
  return standalone(config, options, route && usesJwt(route) ? [verifyJwtStep, rateLimitStep] : [rateLimitStep]);
}

export type IdempotencyOptions = SharedOptions & NonNullable<RouteInput["idempotency"]> & { name?: string };

/**
 * One side effect per `Idempotency-Key`: the first request runs, duplicates get its stored
 * answer (`Idempotent-Replayed: true`), a duplicate in flight gets 409, a key reused with another
 * body 422; the handler finds the fencing token in `c.get("sluice").fencingToken`.
 */
export function idempotency(options: IdempotencyOptions = {}): MiddlewareHandler<SluiceEnv> {
  const { name = "app", ...rest } = options;
  const config = compileOptions("idempotency", options, { name, idempotency: routeFields(rest) }, "idempotency");
  return standalone(config, options, withJwt(config, idempotencyStep));
}

export type SessionOptions = SharedOptions & NonNullable<RouteInput["session"]> & { name?: string };

/** One side-effecting call per session at a time (a 409 problem for the second), with a fencing token. */
export function session(options: SessionOptions): MiddlewareHandler<SluiceEnv> {
  const { name = "app", ...rest } = options;
  const config = compileOptions("session", options, { name, session: routeFields(rest) }, "session");
  return standalone(config, options, withJwt(config, sessionStep));
}

/**
 * With a `jwt` option the middleware verifies the bearer token itself (unless `verifyJwt()` or
 * hono's `jwt()` ran before), so that an `auto` or `jwt:` principal is the token's subject.
 */
function withJwt(config: Config, step: Step): Step[] {
  return config.jwt ? [verifyJwtStep, step] : [step];
}

export type BreakerOptions = SharedOptions &
  NonNullable<RouteInput["breaker"]> & { name?: string; fallback?: RouteInput["fallback"] };

/** A circuit breaker around the handler: while the handler keeps failing (5xx, slow), 503 (or `fallback`) without calling it. */
export function breaker(options: BreakerOptions = {}): MiddlewareHandler<SluiceEnv> {
  const { name = "app", fallback, ...rest } = options;
  const config = compileOptions("breaker", options, { name, breaker: routeFields(rest), fallback }, "breaker");
  return standalone(config, options, [breakerStep]);
}

/**
 * The deny and allow lists managed with the admin API: a denied client gets 403. While an entry
 * names a JWT claim it verifies the bearer token itself (the `jwt` settings and the Worker's
 * secret), unless `verifyJwt()` or hono's `jwt()` put verified claims on the context before it.
 */
export function accessLists(options: SharedOptions & { name?: string } = {}): MiddlewareHandler<SluiceEnv> {
  const config = compileOptions("accessLists", options, { name: options.name ?? "app" });
  return standalone(config, options, [accessListsStep]);
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
  const config = compileOptions("verifyJwt", options, { name: "app" });
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

/**
 * The whole gateway as one middleware, configured like `[vars.SLUICE]`: routes matched on the
 * normalised path, lists, breakers, limits with their shedding, idempotency, sessions. With
 * `origin`, allowed requests are forwarded there; without, they go on to the app's handlers.
 */
export function sluice(
  config: SluiceInput,
  options: SharedOptions & { origin?: string } = {},
): MiddlewareHandler<SluiceEnv> {
  const loaded = loadConfig({ ORIGIN_URL: options.origin, SLUICE: config, originOptional: true });
  if (!loaded.ok) throw loaded.error;
  const compiled = loaded.config;
  const steps: Step[] = compiled.originUrl ? [...PIPELINE_STEPS, (c) => forwardToOrigin(c)] : PIPELINE_STEPS;
  return standalone(compiled, options, steps, { matchRoutes: true });
}

/** Optional fields left out, so the schema's defaults apply. */
function routeFields(fields: Record<string, unknown>): Record<string, unknown> {
  const shared = new Set<string>(["redis", "runtime", ...SHARED_FIELDS]);
  return Object.fromEntries(Object.entries(fields).filter(([k, v]) => v !== undefined && !shared.has(k)));
}
