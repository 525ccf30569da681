import { Hono, type ErrorHandler, type MiddlewareHandler } from "hono";
import { adminApp } from "../admin/index.js";
import { adminRequest } from "../admin/path.js";
import type { Scope, SluiceEnv } from "../context.js";
import type { Env } from "../env.js";
import { Runtime } from "../runtime.js";
import { answerEveryError } from "../pipeline/error-answer.js";
import { forwardToOrigin } from "../pipeline/forward-to-origin.js";
import { mount } from "../pipeline/mount.js";
import { entered, newScope, type ScopeSource } from "../pipeline/scope.js";
import { ConfigCache, invalidConfiguration } from "../config/cache.js";
import { envConnections } from "../region/index.js";
import { PIPELINE_STEPS } from "../pipeline/steps.js";

export type GatewayEnv = SluiceEnv & { Bindings: Env };

/**
 * The sluice gateway: the admin API, then the request path mounted on the environment's
 * configuration (`wrangler.toml`), the same mount `sluice()` is (src/pipeline/mount.ts), with
 * forwarding to the origin as the final handler.
 */
export function createApp(runtime = new Runtime()): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>();
  app.use("*", adminApi(runtime)); //  /__sluice/… in any spelling: the admin API
  app.use("*", mount({ scope: configuredScope(runtime), answer: answerEveryError, nested: false }, PIPELINE_STEPS));
  app.all("*", forwardToOrigin); //    the origin, body streamed both ways
  app.onError(answerError);
  return app;
}

/** What the origin's forwarding throws is answered as the pipeline answers (src/pipeline/error-answer.ts). */
export const answerError: ErrorHandler<GatewayEnv> = (err, c) =>
  answerEveryError(err, c, c.get("sluiceScope") as Scope | undefined);

/** Requests for the admin API go to it, under their normal path; the rest go on. */
function adminApi(runtime: Runtime): MiddlewareHandler<GatewayEnv> {
  const admin = adminApp(runtime);
  return async (c, next) => {
    const request = adminRequest(c.req.raw);
    if (request === undefined) return next();
    let ctx: ExecutionContext | undefined;
    try {
      ctx = c.executionCtx;
    } catch {
      ctx = undefined;
    }
    return admin.fetch(request, c.env, ctx);
  };
}

/**
 * The gateway's scope: the configuration of the environment (a bad one is a plain 500 problem on
 * every request, its field in the log and the admin API), then the request's scope, its route
 * matched on the normalised path.
 */
export function configuredScope(runtime: Runtime): ScopeSource {
  return (c) => {
    const env = c.env as Env;
    const loaded = runtime.own(ConfigCache).of(env);
    // what is wrong is the operator's to read (log, check, admin API), not any client's
    if (!loaded.ok) throw invalidConfiguration(loaded.error, false);
    const config = loaded.config;
    return entered(newScope(c, { runtime, config, connect: envConnections(env, config.home_region), env }, true));
  };
}
