import { Hono, type ErrorHandler, type MiddlewareHandler } from "hono";
import { HTTPException } from "hono/http-exception";
import { adminApp } from "./admin/index.js";
import type { Scope, SluiceEnv } from "./context.js";
import type { Env } from "./env.js";
import { forwardToOrigin } from "./gateway/forward.js";
import { gatewayScope } from "./gateway/scope.js";
import { accessListsStep } from "./middleware/access-lists/index.js";
import { breakerStep } from "./middleware/breaker/index.js";
import { decisions } from "./middleware/decision/index.js";
import { idempotencyStep } from "./middleware/idempotency/index.js";
import { rateLimitStep } from "./middleware/rate-limit/index.js";
import { sessionStep } from "./middleware/session/index.js";
import { keepFallbackCopies } from "./middleware/shedding/index.js";
import { inGateway, type Step } from "./middleware/step.js";
import { verifyJwtStep } from "./middleware/verify-jwt/index.js";
import { Problem, problem } from "./problem.js";
import { jobStatus } from "./queue/enqueue.js";
import { DEFAULT_PATH_POLICY, normalisePath, type PathPolicy } from "./routing/normalise.js";
import { Runtime } from "./runtime.js";
import { logError } from "./util/log.js";

export type GatewayEnv = SluiceEnv & { Bindings: Env };

/**
 * The sluice gateway: the steps of the request path as middleware, in the order a request meets
 * them, with forwarding to the origin as the final handler. Each step is also a middleware of the
 * public API (src/index.ts); here they share the scope `gatewayScope` makes from `wrangler.toml`.
 */
export function createApp(runtime = new Runtime()): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>();
  app.use("*", adminApi(runtime)); //      /__sluice/… in any spelling: the admin API
  app.use("*", decisions()); //            stamps Sluice-Decision / Sluice-Region, counts metrics
  app.use("*", gatewayScope(runtime)); //  configuration → region → normalised path → route
  for (const step of GATEWAY_STEPS) app.use("*", inGateway(step));
  app.all("*", forwardToOrigin); //        the origin, body streamed both ways
  app.onError(answerError);
  return app;
}

/** The steps of the request path, in the order a request meets them (also what `sluice()` runs). */
export const GATEWAY_STEPS: Step[] = [
  jobStatus, //           GET /__sluice-jobs/{id}: a queued request's status
  accessListsStep, //     deny list → 403 (a jwt: entry verifies the token first); an allow-listed client skips the limits
  verifyJwtStep, //       claims, for routes keyed on the JWT
  breakerStep, //         open → fallback or 503; records the origin's outcome after the response
  rateLimitStep, //       one Redis call decides every limit; a refusal is shed as on_limit says
  idempotencyStep, //     one side effect per key; duplicates get the replay; settles after the response
  sessionStep, //         one call per session at a time; released after the response
  keepFallbackCopies, //  keeps the last good copy of a fallback route's page after the response
];

/**
 * A problem is answered as itself; anything else that throws becomes a 500 problem (the outer
 * middleware still stamps the decision headers on it), never a bare 500. Types take the
 * configuration's `problem_base` once a scope exists (before it, the configuration may be the problem).
 */
export const answerError: ErrorHandler<GatewayEnv> = (err, c) => {
  const base = (c.get("sluiceScope") as Scope | undefined)?.config.problem_base;
  if (err instanceof Problem) return err.getResponse(base);
  if (err instanceof HTTPException) return err.getResponse();
  logError("unhandled", err);
  return problem({ status: 500, title: "Internal error", detail: "sluice failed to handle this request" }, base);
};

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
