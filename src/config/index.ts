import { loadConfigWith, type Config, type ConfigError, type ConfigVars } from "./load.js";
import { sluiceSchema } from "./schema.js";
import { WORKER_SOURCE } from "./worker-source.js";
import { checkReconcileHost } from "../features/guard/idempotency/reconcile-check.js";
import { globalQuotaWarnings, type ScopeWarning } from "./global-quotas.js";
import { routeWarnings, type ConfigWarning } from "./route-warnings.js";

export { ConfigError, type Config, type ConfigVars, type Limit, type Route } from "./load.js";
export type { ConfigWarning, ScopeWarning };

/**
 * A valid configuration, with what it may cost or do that is not an error: shared quotas kept per
 * region (src/config/global-quotas.ts), routes that do nothing or can never match
 * (src/config/route-warnings.ts), which `npm run check`, the dev start and the Worker report.
 */
export type ConfigResult = { ok: true; config: Config; warnings: ConfigWarning[] } | { ok: false; error: ConfigError };

/**
 * Validates the `SLUICE` variable (an object, or its JSON text) and `ORIGIN_URL` as the gateway
 * takes them (every feature's table on a route), and compiles them into what the request path
 * needs. Never throws: a bad configuration is a value (see `loadConfigWith`).
 *
 * @example
 * const r = loadConfig({ ORIGIN_URL: "https://api.example.com", SLUICE: { routes: [] } });
 * if (!r.ok) console.error(r.error.message); // e.g. 'SLUICE.routes[0] ("api").limits[0] ("per-ip").rate: ...'
 */
export function loadConfig(vars: ConfigVars): ConfigResult {
  const result = loadConfigWith(sluiceSchema(), vars, WORKER_SOURCE, [checkReconcileHost]);
  if (!result.ok) return result;
  // read as written (it parsed above): an explicit `scope = "region"` silences a warning, a default does not
  const written: unknown = typeof vars.SLUICE === "string" ? JSON.parse(vars.SLUICE) : (vars.SLUICE ?? {});
  return { ...result, warnings: [...globalQuotaWarnings(result.config, written), ...routeWarnings(result.config)] };
}
