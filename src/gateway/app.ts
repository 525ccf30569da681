import { Hono, type ErrorHandler, type MiddlewareHandler } from "hono";
import { adminApp } from "../admin/index.js";
import type { Scope, SluiceEnv } from "../context.js";
import type { Env } from "../env.js";
import { DEFAULT_PATH_POLICY, normalisePath, type PathPolicy } from "../routing/normalise.js";
import { Runtime } from "../runtime.js";
import { answerAll } from "../pipeline/answer.js";
import { forwardToOrigin } from "../pipeline/forward.js";
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
  app.use("*", mount({ scope: configuredScope(runtime), answer: answerAll, nested: false }, PIPELINE_STEPS));
  app.all("*", forwardToOrigin); //    the origin, body streamed both ways
  app.onError(answerError);
  return app;
}

/** What the origin's forwarding throws is answered as the pipeline answers (src/pipeline/answer.ts). */
export const answerError: ErrorHandler<GatewayEnv> = (err, c) =>
  answerAll(err, c, c.get("sluiceScope") as Scope | undefined);

/** `/__sluice` as a whole first segment, in any case (`/__sluice-jobs/…` is not the admin API). */
const ADMIN_PREFIX = /^\/__sluice(?=\/|$)/i;

/** The default normalisation but case-sensitive, so route and limit names reach the admin API as configured. */
const ADMIN_NAMES: PathPolicy = { ...DEFAULT_PATH_POLICY, case: "sensitive", trailing_slash: "ignore" };

/**
 * The path the admin API routes on, or `undefined` when the request is not for it. The prefix is
 * found in the case-folded normal form, so `//__sluice/x` or `/__SLUICE/x` never reach the origin;
 * the rest keeps its case (route and limit names may have capitals) and only the prefix is
 * spelled `/__sluice`.
 *
 * @example adminPath("//__SLUICE/buckets/Checkout/PerIP") // "/__sluice/buckets/Checkout/PerIP"
 */
function adminPath(pathname: string): string | undefined {
  const folded = normalisePath(pathname);
  if (!folded.ok || !ADMIN_PREFIX.test(folded.path.match)) return undefined;
  const named = normalisePath(pathname, ADMIN_NAMES);
  // case-folding changes no segment of an ASCII path, so the same prefix is there in any case
  return named.ok ? named.path.match.replace(ADMIN_PREFIX, "/__sluice") : undefined;
}

/** Requests for the admin API go to it, under their normal path; the rest go on. */
function adminApi(runtime: Runtime): MiddlewareHandler<GatewayEnv> {
  const admin = adminApp(runtime);
  return async (c, next) => {
    const url = new URL(c.req.url);
    const path = adminPath(url.pathname);
    if (path === undefined) return next();
    url.pathname = path;
    let ctx: ExecutionContext | undefined;
    try {
      ctx = c.executionCtx;
    } catch {
      ctx = undefined;
    }
    return admin.fetch(new Request(url, c.req.raw), c.env, ctx);
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
