import { loadConfig, type ConfigResult, type Limit } from "../../src/config/index.js";

/** One route `r` holding `defs` as its limits (named l0, l1, ... unless a def names itself), as the config loads them. */
export function loadLimits(defs: ReadonlyArray<Record<string, unknown>>): ConfigResult {
  return loadConfig({
    ORIGIN_URL: "https://o.example",
    SLUICE: { routes: [{ name: "r", match: "/", limits: defs.map((d, i) => ({ name: `l${i}`, ...d })) }] },
  });
}

/** The compiled limits of `defs`; throws the configuration error when they do not load. */
export function compileLimits(defs: ReadonlyArray<Record<string, unknown>>): Limit[] {
  const r = loadLimits(defs);
  if (!r.ok) throw r.error;
  return r.config.routes[0]!.limits;
}
