import type { MiddlewareHandler } from "hono";
import type { AdminEnv } from "../operator/context.js";
import { Problem } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";
import { ConfigCache } from "../config/cache.js";
import { envConnections } from "../region/index.js";
import type { Runtime } from "../runtime.js";

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
        type: PROBLEMS.invalidConfiguration,
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
