import * as z from "zod/mini";
import { deferred, lazy } from "./lazy.js";
import { configSchema } from "./settings.js";
import { breakerSettings } from "../features/breaker/schema.js";
import { idempotencySettings } from "../features/guard/idempotency/schema.js";
import { sessionSettings } from "../features/guard/session/schema.js";
import { mcpSettings } from "../features/mcp/schema.js";

// The configuration of [vars.SLUICE] as the gateway takes it: each feature's options come from its
// folder (src/features/*/schema.ts), written in the shared pieces of ./primitives.ts, composed into
// a route and the whole in ./settings.ts; here a route gets every feature's table. Built on first
// use (./lazy.ts), as every schema of the configuration is.

export const sluiceSchema = /* @__PURE__ */ lazy(() =>
  configSchema({
    breaker: z.optional(deferred(breakerSettings)),
    /** One side-effecting call per session at a time (see docs/idempotency-and-sessions.md, Sessions). */
    session: z.optional(deferred(sessionSettings)),
    /** One side effect per Idempotency-Key (see docs/idempotency-and-sessions.md, Idempotency). */
    idempotency: z.optional(deferred(idempotencySettings)),
    /** An MCP endpoint: each tools/call limited per tool, a guarded call run once (see docs/mcp.md). */
    mcp: z.optional(deferred(mcpSettings)),
  }),
);

export type SluiceInput = z.input<ReturnType<typeof sluiceSchema>>;
export type SluiceSettings = z.output<ReturnType<typeof sluiceSchema>>;
export type RouteSettings = SluiceSettings["routes"][number];
export type LimitSettings = RouteSettings["limits"][number];
