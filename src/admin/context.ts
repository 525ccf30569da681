import type { Context, MiddlewareHandler } from "hono";
import { createFactory } from "hono/factory";
import type { Config } from "../config/index.js";
import type { Env } from "../env.js";
import type { Defer } from "../util/defer.js";
import { Problem } from "../problem.js";
import type { ProblemTitle } from "../problem-types.js";
import { envConnections, type Stores } from "../region/index.js";
import { ConfigCache } from "../config/cache.js";
import type { Runtime } from "../runtime.js";
import type { Store } from "../store/redis.js";

/**
 * What every admin handler finds on its context: the deployment's configuration and databases
 * (set by `withConfig`), and `authorised`: the request carried the admin token or a valid
 * dashboard session (set by the guard; health says more then).
 */
export type AdminEnv = { Bindings: Env; Variables: { config: Config; stores: Stores; authorised: boolean } };

/**
 * Handlers written apart from the sub-app that mounts them, typed with the admin's context (and
 * with what their validators check).
 *
 * @example const removeEntry = adminHandlers.createHandlers(jsonBody(removal), (c) => c.json(c.req.valid("json")));
 */
export const adminHandlers = createFactory<AdminEnv>();

/**
 * Loads the configuration (validated once per environment by the runtime) and the stores it
 * names. An invalid configuration is never half-applied: every admin request gets the same 500
 * problem the gateway gives, with the decision headers a refusal carries.
 */
export function withConfig(runtime: Runtime): MiddlewareHandler<AdminEnv> {
  return async (c, next) => {
    const loaded = runtime.own(ConfigCache).of(c.env);
    if (!loaded.ok) {
      throw new Problem({
        status: 500,
        title: "Invalid sluice configuration",
        detail: loaded.error.message,
        headers: { "Sluice-Decision": "reject", "Sluice-Region": "unknown" },
      });
    }
    c.set("config", loaded.config);
    c.set("stores", runtime.stores(envConnections(c.env, loaded.config.home_region), loaded.config));
    c.set("authorised", false);
    await next();
  };
}

/** A store the route cannot do without: its absence (no Redis configured) is a 503 problem. */
export function required(store: Store | undefined, title: ProblemTitle, detail: string): Store {
  if (!store) throw new Problem({ status: 503, title, detail });
  return store;
}

/** `ctx.waitUntil` where the runtime gives one (always on Workers); otherwise the work just runs. */
export function deferOf(c: Context<AdminEnv>): Defer {
  try {
    const ctx = c.executionCtx;
    return (work) => ctx.waitUntil(work);
  } catch {
    // Hono throws when the app was called without an execution context (tests calling it bare)
    return (work) => void work;
  }
}
