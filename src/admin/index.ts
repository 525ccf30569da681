import { Hono, type Context, type MiddlewareHandler } from "hono";
import type { Config } from "../config/index.js";
import { HTTPException } from "hono/http-exception";
import { Problem, problem } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";
import { AuthThrottle } from "../features/access/auth-throttle.js";
import type { Runtime } from "../runtime.js";
import { bucketsApp } from "../features/rate-limit/admin-buckets.js";
import { configApp } from "./config.js";
import type { AdminEnv } from "../operator/context.js";
import { dashboardApp } from "./dashboard.js";
import { tokenGate } from "./token-gate.js";
import { healthApp } from "./health.js";
import { idempotencyApp } from "../features/guard/idempotency/admin.js";
import { ledgerApp } from "./ledger-query.js";
import { listsApp } from "../features/access/admin.js";
import { listsOf } from "../features/access/lists.js";
import { routesApp } from "../features/access/mode/admin.js";
import { metricsApp } from "./metrics.js";
import { overridesApp } from "../features/rate-limit/admin-overrides.js";
import { problemsApp } from "./problems.js";
import { withConfig } from "./with-config.js";
import { badRequest } from "../operator/validate.js";
import { logError } from "../util/log.js";

export type { AdminEnv } from "../operator/context.js";

/**
 * The admin API under `/__sluice/`, one sub-app per resource behind one token gate: `health` answers
 * anybody that sluice is up, and the operator each region's Redis; everything else needs
 * `Authorization: Bearer <SLUICE_ADMIN_TOKEN>` (compared in constant time, failures throttled per
 * client) or the dashboard's session, and the whole API is off (404) when no token is
 * configured. JSON in and out; every error is a problem (RFC 9457).
 *
 * Takes the isolate's `runtime`: its configuration cache, stores, override copies and metrics are
 * the ones the gateway uses, so a metrics scrape flushes the counts the gateway made. `load` puts
 * the configuration and stores on the context: the Worker's `SLUICE` by default, the options of
 * `adminApi()` in a user's app (src/middleware/admin-api.ts).
 *
 * @example
 * const admin = adminApp(runtime);
 * admin.fetch(new Request(url, c.req.raw), c.env, ctx);
 */
export function adminApp(runtime: Runtime, load: MiddlewareHandler<AdminEnv> = withConfig(runtime)): Hono<AdminEnv> {
  const admin = new Hono<AdminEnv>().basePath("/__sluice");
  // before the token gate: the pages problem types link to are documentation for any client
  admin.route("/problems", problemsApp(runtime));
  admin.use("*", load, tokenGate(runtime.own(AuthThrottle)));
  admin.route("/", dashboardApp(runtime.own(AuthThrottle)));
  admin.route("/health", healthApp());
  admin.route("/config", configApp());
  admin.route("/buckets", bucketsApp());
  admin.route("/overrides", overridesApp());
  admin.route("/lists", listsApp(listsOf(runtime)));
  admin.route("/routes", routesApp(listsOf(runtime)));
  admin.route("/metrics", metricsApp(runtime.metrics));
  admin.route("/ledger", ledgerApp());
  admin.route("/idempotency", idempotencyApp());
  // reached after the token gate, so an unknown path tells a caller without the token nothing either
  admin.notFound((c) => problem({ type: PROBLEMS.notFound, detail: "no such admin route" }, baseOf(c)));
  admin.onError(answerError);
  return admin;
}

/** The configuration's `problem_base`, once `withConfig` has loaded it (none: the configuration is the problem). */
function baseOf(c: Context<AdminEnv>): string | undefined {
  return (c.get("config") as Config | undefined)?.problem_base;
}

/** Problems are answered as thrown; anything else is a 500 problem that names nothing internal. */
function answerError(err: Error, c: Context<AdminEnv>): Response {
  const base = baseOf(c);
  if (err instanceof Problem) return err.getResponse(base);
  // Hono's validators refuse a body that does not parse (malformed JSON or form) with a bare 400
  if (err instanceof HTTPException && err.status === 400) return badRequest(`body: ${err.message}`).getResponse(base);
  if (err instanceof HTTPException) return err.getResponse();
  logError("unhandled", err, { where: "admin" });
  const res = problem({ type: PROBLEMS.internalError, detail: "sluice failed to handle this request" }, base);
  res.headers.set("Sluice-Decision", "reject");
  res.headers.set("Sluice-Region", "unknown");
  return res;
}
