import type { Config } from "../config/index.js";
import type { Stores } from "../region/index.js";
import type { ServedView } from "../operator/served.js";
import { regionsHealth } from "./health.js";
import { entriesInForce } from "../features/access/admin.js";
import { overridesInForce } from "../features/rate-limit/admin-overrides.js";
import { routeModes } from "../features/access/mode/admin.js";
import type { DashboardView, LimitChoice, PanelsData } from "./view/types.js";
import { logError } from "../util/log.js";

/**
 * What the dashboard's panels draw: the figures of `dashboardData` (passed in, as a promise), the
 * lists, the overrides and the routes' degrade switches in force (home region) and each region's Redis (one PING each), read in
 * parallel. A read that fails leaves its panel empty and says so in `unavailable`: the page an
 * operator opens during a Redis incident must still render.
 */
export async function panelsData(
  config: Config,
  stores: Stores,
  figures: Promise<DashboardView>,
  served?: ServedView,
): Promise<PanelsData> {
  const unavailable: string[] = [];
  const or = <T>(what: string, p: Promise<T>, fallback: T): Promise<T> =>
    p.catch((e: unknown) => {
      logError("dashboard_panel_failed", e, { panel: what });
      unavailable.push(what);
      return fallback;
    });
  const [dashboard, lists, overrides, modes, health] = await Promise.all([
    or("the figures", figures, { minutes: [], routes: [], top_blocked: [] }),
    or("the lists", entriesInForce(config, stores), []),
    or("the overrides", overridesInForce(config, stores), []),
    or("the route modes", routeModes(config, stores), []),
    regionsHealth(config, stores),
  ]);
  // a route whose middleware apply no modes has no switch to show (adminApi() beside rateLimit() alone)
  const switchable = modes.filter((m) => !served?.gap(m.name, "modes"));
  return { dashboard, lists, overrides, modes: switchable, health, unavailable };
}

/** Every configured route a middleware applies route modes for (in the gateway: all), for the degrade form. */
export function routeChoices(config: Config, served?: ServedView): string[] {
  return config.routes.map((r) => r.name).filter((name) => !served?.gap(name, "modes"));
}

/** Every configured route and limit a middleware decides (in the gateway: all), for the override form. */
export function limitChoices(config: Config, served?: ServedView): LimitChoice[] {
  return config.routes.flatMap((r) =>
    r.limits.filter((l) => !served?.gap(r.name, "limits", l.name)).map((l) => ({ route: r.name, limit: l.name })),
  );
}
