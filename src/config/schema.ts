import * as z from "zod/mini";
import { configSchema } from "./settings.js";
import { breakerSettings } from "../features/breaker/schema.js";
import { idempotencySettings } from "../features/idempotency/schema.js";
import { sessionSettings } from "../features/session/schema.js";

// The configuration of [vars.SLUICE] as the gateway takes it: each feature's options come from its
// folder (src/features/*/schema.ts), written in the shared pieces of ./primitives.ts, composed into
// a route and the whole in ./settings.ts; here a route gets every feature's table.

export const sluiceSchema = configSchema({
  breaker: z.optional(breakerSettings),
  /** One side-effecting call per session at a time (see docs/idempotency-and-sessions.md, Sessions). */
  session: z.optional(sessionSettings),
  /** One side effect per Idempotency-Key (see docs/idempotency-and-sessions.md, Idempotency). */
  idempotency: z.optional(idempotencySettings),
});

export type SluiceInput = z.input<typeof sluiceSchema>;
export type SluiceSettings = z.output<typeof sluiceSchema>;
export type RouteSettings = SluiceSettings["routes"][number];
export type LimitSettings = RouteSettings["limits"][number];
