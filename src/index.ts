/**
 * sluice as middleware for a Hono app of your own. Each middleware is also a subpath of its own
 * (`sluice/rate-limit`, `sluice/idempotency`, `sluice/session`, `sluice/breaker`,
 * `sluice/access`, `sluice/admin`), and the gateway
 * Worker's app is `sluice/gateway`: a bundler keeps only what the app imports.
 *
 * @example
 * import { Hono } from "hono";
 * import { rateLimit, idempotency } from "sluice";
 * const app = new Hono();
 * app.use("/api/*", rateLimit({ limits: [{ name: "per-ip", key: "ip", rate: 10, period: "1s", burst: 20 }] }));
 * app.post("/orders", idempotency({ required: true }), (c) => c.json({ created: true }, 201));
 */
export type { SharedOptions } from "./middleware/standalone.js";
export type { SluiceDecision, SluiceEnv, SluiceVariables, LimitState } from "./context.js";
// the capabilities' results on Hono's context (`c.get("sluiceLimits")`, `"sluiceGuards"`, `"sluiceSwitch"`):
// exported, their `ContextVariableMap` declarations come with them
export type { DecidedLimit, LimitSummary } from "./features/rate-limit/vars.js";
export type { GuardsHeld } from "./features/guard/vars.js";
export type { SwitchInForce } from "./features/access/mode/vars.js";
export type { SluiceInput as SluiceConfig } from "./config/schema.js";
export { ConfigError } from "./config/load.js";
export { Problem } from "./problem.js";
export { Runtime } from "./runtime.js";
export { rateLimit, defineLimits, type LimitOptions, type RateLimitOptions } from "./middleware/rate-limit.js";
export {
  limiter,
  type Limiter,
  type LimiterContext,
  type LimiterOptions,
  type LimiterResult,
} from "./middleware/limiter.js";
export { idempotency, type IdempotencyOptions } from "./middleware/idempotency.js";
export { session, type SessionOptions } from "./middleware/session.js";
export { breaker, type BreakerOptions } from "./middleware/breaker.js";
export { accessLists, verifyJwt, type VerifyJwtOptions } from "./middleware/access.js";
export { sluice } from "./middleware/sluice.js";
export { adminApi, type AdminApiOptions, type AdminConfigInput } from "./middleware/admin-api.js";
