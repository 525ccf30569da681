import { matchesPattern, type PathPattern } from "./match.js";

/**
 * What routing reads of a route (the configuration's `Route` has these and more): routing takes
 * any route of this shape and hands back the caller's own type, so it imports no configuration.
 */
export interface RoutableRoute {
  name: string;
  pattern: PathPattern;
  methods?: readonly string[] | undefined;
  peek?: boolean | string;
}

/**
 * The first route whose pattern and methods match, or `undefined` (then the request is
 * forwarded without limits). HEAD counts as GET, so a GET limit cannot be dodged with HEAD.
 */
export function findRoute<R extends RoutableRoute>(
  routes: readonly R[],
  method: string,
  matchPath: string,
): R | undefined {
  const m = method.toUpperCase();
  return routes.find(
    (r) =>
      matchesPattern(r.pattern, matchPath) &&
      (!r.methods || r.methods.includes(m) || (m === "HEAD" && r.methods.includes("GET"))),
  );
}

/** The route whose limits a request is decided against: its own, or the one a peek route names. */
export function limitedRoute<R extends RoutableRoute>(scope: { config: { routes: readonly R[] } }, route: R): R {
  return typeof route.peek === "string" ? (scope.config.routes.find((r) => r.name === route.peek) ?? route) : route;
}
