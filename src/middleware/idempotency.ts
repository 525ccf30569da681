/**
 * `sluice/idempotency`: one side effect per `Idempotency-Key`.
 *
 * @example
 * import { idempotency } from "sluice/idempotency";
 * app.post("/orders", idempotency({ required: true }), (c) => c.json({ created: true }, 201));
 */
import type { MiddlewareHandler } from "hono";
import * as z from "zod/mini";
import type { SluiceInput } from "../config/schema.js";
import { deferred, lazy } from "../config/lazy.js";
import { configSchema } from "../config/settings.js";
import type { SluiceEnv } from "../context.js";
import { idempotencySettings } from "../features/guard/idempotency/schema.js";
import { guardStep } from "../features/guard/step.js";
import { checkReconcileHost } from "../features/guard/idempotency/reconcile-check.js";
import type { Literal } from "./literal-options.js";
import { compileOptions, standalone, tableFields, type SharedOptions } from "./standalone.js";
import { withJwt } from "../features/jwt/step.js";

export type { SluiceDecision, SluiceEnv, SluiceVariables, LimitState } from "../context.js";
export type { SharedOptions } from "./standalone.js";
// what the middleware publishes as `c.get("sluiceGuards")`: exported, its declaration comes with it
export type { GuardsHeld } from "../features/guard/vars.js";

type RouteInput = NonNullable<SluiceInput["routes"]>[number];

export type IdempotencyOptions = SharedOptions & Literal<NonNullable<RouteInput["idempotency"]>> & { name?: string };

const idempotencyConfig = /* @__PURE__ */ lazy(() =>
  configSchema({ idempotency: z.optional(deferred(idempotencySettings)) }),
);

/**
 * One side effect per `Idempotency-Key`: the first request runs, duplicates get its stored
 * answer (`Idempotent-Replayed: true`), a duplicate in flight gets 409, a key reused with another
 * body 422; the handler finds the fencing token in `c.get("sluice").fencingToken`.
 */
export function idempotency(options: IdempotencyOptions = {}): MiddlewareHandler<SluiceEnv> {
  const { name = "app", ...rest } = options;
  const route = { name, idempotency: tableFields(rest) };
  const config = compileOptions("idempotency", options, route, {
    schema: idempotencyConfig,
    table: "idempotency",
    checks: [checkReconcileHost],
  });
  return standalone(config, options, withJwt(config, guardStep), { by: "idempotency()", duties: [] });
}
