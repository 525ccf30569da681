import type { Context, MiddlewareHandler, Next } from "hono";
import type { Scope, SluiceEnv } from "../context.js";

/**
 * One step of the request path, Hono-shaped but with its scope handed in: the same step serves
 * the gateway (scope made by the gateway's first middleware) and a standalone middleware in an
 * app of the user's own (scope made by the middleware itself).
 */
export type Step = (c: Context<SluiceEnv>, scope: Scope, next: Next) => Promise<Response | void>;

/** A step as gateway middleware: its scope is the one `gatewayScope()` put on the context. */
export function inGateway(step: Step): MiddlewareHandler<SluiceEnv> {
  return (c, next) => step(c, c.get("sluiceScope"), next);
}
