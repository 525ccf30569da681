import type { Context, Next } from "hono";
import type { Scope, SluiceEnv } from "../context.js";

/**
 * One step of the request path, Hono-shaped but with its scope handed in: the same step serves
 * the gateway (scope made by the gateway's first middleware) and a standalone middleware in an
 * app of the user's own (scope made by the middleware itself).
 */
export type Step = (c: Context<SluiceEnv>, scope: Scope, next: Next) => Promise<Response | void>;
