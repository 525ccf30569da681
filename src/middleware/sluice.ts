import type { MiddlewareHandler } from "hono";
import { loadConfig } from "../config/index.js";
import type { SluiceInput } from "../config/schema.js";
import type { SluiceEnv } from "../context.js";
import { forwardToOrigin } from "../pipeline/forward-to-origin.js";
import { PIPELINE_STEPS } from "../pipeline/steps.js";
import type { Step } from "./step.js";
import { standalone, type Serves, type SharedOptions } from "./standalone.js";

/** sluice(config) runs every step: its routes' limits, lists and modes are all applied. */
const SLUICE_SERVES: Serves = { by: "sluice()", duties: ["limits", "lists", "modes"] };

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
  return standalone(compiled, options, steps, SLUICE_SERVES, { matchRoutes: true });
}
