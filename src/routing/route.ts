import type { Config, Route } from "../config/index.js";
import { matchesPattern } from "./match.js";

/**
 * The first route whose pattern and methods match, or `undefined` (then the request is
 * forwarded without limits). HEAD counts as GET, so a GET limit cannot be dodged with HEAD.
 */
export function findRoute(routes: readonly Route[], method: string, matchPath: string): Route | undefined {
  const m = method.toUpperCase();
  return routes.find(
    (r) =>
      matchesPattern(r.pattern, matchPath) &&
      (!r.methods || r.methods.includes(m) || (m === "HEAD" && r.methods.includes("GET"))),
  );
}

/** The route whose limits a request is decided against: its own, or the one a peek route names. */
export function limitedRoute(scope: { config: Pick<Config, "routes"> }, route: Route): Route {
  return typeof route.peek === "string" ? (scope.config.routes.find((r) => r.name === route.peek) ?? route) : route;
}
