/**
 * `sluice/breaker`: a circuit breaker around the handler.
 *
 * @example
 * import { breaker } from "sluice/breaker";
 * app.use("/search/*", breaker({ error_ratio: 0.5, cooldown: "10s" }));
 */
import type { MiddlewareHandler } from "hono";
import * as z from "zod/mini";
import type { SluiceInput } from "../config/schema.js";
import { deferred, lazy } from "../config/lazy.js";
import { configSchema } from "../config/settings.js";
import type { SluiceEnv } from "../context.js";
import { breakerSettings } from "../features/breaker/schema.js";
import { breakerStep } from "../features/breaker/step.js";
import type { Literal } from "./literal-options.js";
import { compileOptions, standalone, tableFields, type SharedOptions } from "./standalone.js";

export type { SluiceDecision, SluiceEnv, SluiceVariables, LimitState } from "../context.js";
export type { SharedOptions } from "./standalone.js";

type RouteInput = NonNullable<SluiceInput["routes"]>[number];

export type BreakerOptions = SharedOptions &
  Literal<NonNullable<RouteInput["breaker"]>> & { name?: string; fallback?: RouteInput["fallback"] };

const breakerConfig = /* @__PURE__ */ lazy(() => configSchema({ breaker: z.optional(deferred(breakerSettings)) }));

/** A circuit breaker around the handler: while the handler keeps failing (5xx, slow), 503 (or `fallback`) without calling it. */
export function breaker(options: BreakerOptions = {}): MiddlewareHandler<SluiceEnv> {
  const { name = "app", fallback, ...rest } = options;
  const route = { name, breaker: tableFields(rest), fallback };
  const config = compileOptions("breaker", options, route, { schema: breakerConfig, table: "breaker" });
  return standalone(config, options, [breakerStep], { by: "breaker()", duties: [] });
}
