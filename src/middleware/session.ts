/**
 * `sluice/session`: one side-effecting call per session at a time.
 *
 * @example
 * import { session } from "sluice/session";
 * app.use("/cart/*", session({ key: "header:x-session-id" }));
 */
import type { MiddlewareHandler } from "hono";
import * as z from "zod/mini";
import type { SluiceInput } from "../config/schema.js";
import { deferred, lazy } from "../config/lazy.js";
import { configSchema } from "../config/settings.js";
import type { SluiceEnv } from "../context.js";
import { sessionSettings } from "../features/guard/session/schema.js";
import { guardStep } from "../features/guard/step.js";
import type { Literal } from "./literal-options.js";
import { compileOptions, standalone, tableFields, type SharedOptions } from "./standalone.js";
import { withJwt } from "../features/jwt/step.js";

export type { SluiceDecision, SluiceEnv, SluiceVariables, LimitState } from "../context.js";
export type { SharedOptions } from "./standalone.js";
// what the middleware publishes as `c.get("sluiceGuards")`: exported, its declaration comes with it
export type { GuardsHeld } from "../features/guard/vars.js";

type RouteInput = NonNullable<SluiceInput["routes"]>[number];

export type SessionOptions = SharedOptions & Literal<NonNullable<RouteInput["session"]>> & { name?: string };

const sessionConfig = /* @__PURE__ */ lazy(() => configSchema({ session: z.optional(deferred(sessionSettings)) }));

/** One side-effecting call per session at a time (a 409 problem for the second), with a fencing token. */
export function session(options: SessionOptions): MiddlewareHandler<SluiceEnv> {
  const { name = "app", ...rest } = options;
  const route = { name, session: tableFields(rest) };
  const config = compileOptions("session", options, route, { schema: sessionConfig, table: "session" });
  return standalone(config, options, withJwt(config, guardStep), { by: "session()", duties: [] });
}
