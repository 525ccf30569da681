import type { Config, Route } from "./load.js";
import { shadowBudget, shadowedBy } from "../routing/shadow.js";

/**
 * What a valid configuration may do that its author did not mean, told by `npm run check`, the dev
 * start and the Worker's log (once per isolate), never refused: `field` names the place to look,
 * as configuration errors name theirs (`SLUICE.routes[0].match`); `message` names the route.
 */
export interface ConfigWarning {
  route: string;
  /** The limit the warning is about, when it is about one. */
  limit?: string;
  field: string;
  message: string;
}

/** `origin_timeout` when a route sets none (src/config/settings.ts). */
const DEFAULT_ORIGIN_TIMEOUT_MS = 30_000;

/**
 * The routes' warnings: a route that limits, guards and sheds nothing (its requests are forwarded
 * as if no route matched, and never reach a later route that matches them too), and a route that
 * can never match (every method and path it matches is matched first by earlier routes; decided
 * exactly for the pattern language of src/routing/match.ts, so never a false alarm; within a
 * budget of a few milliseconds, as it runs wherever the configuration loads).
 *
 * @example routeWarnings(config)[0]?.message // 'route "products" can never match: …'
 */
export function routeWarnings(config: Pick<Config, "routes" | "paths">): ConfigWarning[] {
  const strictSlash = config.paths.trailing_slash === "strict";
  const budget = shadowBudget();
  return config.routes.flatMap((route, i) => {
    const warnings: ConfigWarning[] = [];
    if (doesNothing(route)) warnings.push({ route: route.name, field: `SLUICE.routes[${i}]`, message: idle(route) });
    const takers = shadowedBy(config.routes, i, strictSlash, budget);
    if (takers)
      warnings.push({ route: route.name, field: `SLUICE.routes[${i}].match`, message: shadowed(route, takers) });
    return warnings;
  });
}

/**
 * Whether a route changes nothing for the requests it matches: no limit (an adaptive one
 * included), no idempotency, session or breaker table, no shedding of its own (`on_limit`,
 * `fallback`, `divert_url`), no other route's limits to peek at, no method override honoured and
 * the default origin timeout.
 */
function doesNothing(route: Route): boolean {
  return (
    route.limits.length === 0 &&
    route.idempotency === undefined &&
    route.session === undefined &&
    route.breaker === undefined &&
    route.divertUrl === undefined &&
    route.on_limit === "reject" &&
    route.fallback === undefined &&
    typeof route.peek !== "string" &&
    !route.method_override &&
    route.origin_timeout === DEFAULT_ORIGIN_TIMEOUT_MS
  );
}

function idle(route: Route): string {
  return (
    `route "${route.name}" limits, guards and sheds nothing: it has no limits, no idempotency, session or breaker ` +
    `table and no on_limit, fallback or divert_url, so the requests it matches ("${route.match}") are forwarded as if ` +
    `no route matched, and never meet a later route that matches them too (the first route that matches wins). ` +
    `Give it limits, or remove it; if it is there to exempt these paths from the routes after it, this is expected.`
  );
}

function shadowed(route: Route, takers: readonly Route[]): string {
  const names = takers.map((t) => `"${t.name}"`).join(", ");
  const by = takers.length === 1 ? `route ${names}` : `routes ${names}`;
  return (
    `route "${route.name}" can never match: every ${route.methods ? `${route.methods.join("/")} ` : ""}request ` +
    `it matches ("${route.match}") is matched first by ${by}, and the first route that matches wins, so no request ` +
    `ever meets its limits or guards. Move it before ${takers.length === 1 ? "that route" : "them"}, or narrow ` +
    `${takers.length === 1 ? "its" : "their"} match or methods.`
  );
}
