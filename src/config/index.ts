import { loadConfigWith, type ConfigResult, type ConfigVars } from "./load.js";
import { sluiceSchema } from "./schema.js";

export { ConfigError, type Config, type ConfigResult, type ConfigVars, type Limit, type Route } from "./load.js";

/**
 * Validates the `SLUICE` variable (an object, or its JSON text) and `ORIGIN_URL` as the gateway
 * takes them (every feature's table on a route), and compiles them into what the request path
 * needs. Never throws: a bad configuration is a value (see `loadConfigWith`).
 *
 * @example
 * const r = loadConfig({ ORIGIN_URL: "https://api.example.com", SLUICE: { routes: [] } });
 * if (!r.ok) console.error(r.error.message); // e.g. "SLUICE.routes[0].limits[0].rate: ..."
 */
export function loadConfig(vars: ConfigVars): ConfigResult {
  return loadConfigWith(sluiceSchema, vars);
}
