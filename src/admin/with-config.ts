import type { Context, MiddlewareHandler } from "hono";
import type { AdminEnv } from "../operator/context.js";
import { ConfigCache, invalidConfiguration } from "../config/cache.js";
import { AuthThrottle } from "../features/access/auth-throttle.js";
import { clientIp } from "../identity/identify.js";
import { envConnections } from "../region/index.js";
import type { Runtime } from "../runtime.js";
import { tokenMatches } from "./auth.js";
import { beginAuthAttempt, throttled } from "./throttle.js";

/**
 * Loads the configuration (validated once per environment by the runtime) and the stores it
 * names. An invalid configuration is never half-applied: every admin request gets the 500 problem
 * the gateway gives, with the decision headers a refusal carries; the operator's (the request
 * carries the admin token) names the field, as `GET /__sluice/health` with the token is how an
 * operator asks what is wrong.
 */
export function withConfig(runtime: Runtime): MiddlewareHandler<AdminEnv> {
  return async (c, next) => {
    const loaded = runtime.own(ConfigCache).of(c.env);
    if (!loaded.ok) {
      throw invalidConfiguration(loaded.error, await isOperator(c, runtime), {
        "Sluice-Decision": "reject",
        "Sluice-Region": "unknown",
      });
    }
    c.set("config", loaded.config);
    c.set("stores", runtime.stores(envConnections(c.env, loaded.config.home_region), loaded.config));
    c.set("authorised", false);
    await next();
  };
}

/**
 * Whether the request carries the admin token, compared as the guard compares it (constant time,
 * failures throttled per client) but in this isolate alone: without a configuration there is no
 * key prefix or store to count in. A dashboard session cannot be checked without its store.
 */
async function isOperator(c: Context<AdminEnv>, runtime: Runtime): Promise<boolean> {
  const token = c.env.SLUICE_ADMIN_TOKEN;
  const bearer = c.req.header("authorization");
  if (!token || !bearer) return false;
  const attempt = await beginAuthAttempt(runtime.own(AuthThrottle), undefined, "", clientIp(c.req.raw.headers));
  if (attempt.retryAfterMs > 0) throw throttled(attempt.retryAfterMs);
  const matches = await tokenMatches(bearer, token);
  await attempt.settle(matches);
  return matches;
}
