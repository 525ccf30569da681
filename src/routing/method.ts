import { findRoute, type RoutableRoute } from "./route.js";

/** The headers frameworks read a method override from (Express's method-override, Laravel, Symfony). */
export const METHOD_OVERRIDE_HEADERS = ["x-http-method-override", "x-http-method", "x-method-override"] as const;

/** The methods an override may name: what the frameworks that honour one act on. */
const OVERRIDABLE = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

/** The route a request meets and the method its guards decide on; `overridden`: its override header is honoured. */
export interface MethodChoice<R> {
  route?: R;
  method: string;
  overridden: boolean;
}

/**
 * The route and the method the origin will act on. A POST whose override headers name one method
 * (as frameworks read it: case aside) honours it when the route that method meets opts in with
 * `method_override`; otherwise the request is its own method and the headers are stripped before
 * forwarding, so the origin acts on the method sluice decided on either way.
 *
 * @example chooseRoute(routes, request, "/api/items/1") // { route: deletes, method: "DELETE", overridden: true }
 */
export function chooseRoute<R extends RoutableRoute & { method_override?: boolean }>(
  routes: readonly R[],
  request: Request,
  matchPath: string,
): MethodChoice<R> {
  const method = request.method.toUpperCase();
  const wanted = method === "POST" ? overrideOf(request.headers) : undefined;
  if (wanted) {
    const route = findRoute(routes, wanted, matchPath);
    if (route?.method_override) return { route, method: wanted, overridden: true };
  }
  return { route: findRoute(routes, method, matchPath), method, overridden: false };
}

/** The one method the override headers name, or `undefined` (none, several, or not one to honour). */
export function overrideOf(headers: Headers): string | undefined {
  const named = new Set<string>();
  for (const h of METHOD_OVERRIDE_HEADERS) {
    const v = headers.get(h);
    if (v !== null) named.add(v.trim().toUpperCase());
  }
  const [only] = named;
  return named.size === 1 && only !== undefined && OVERRIDABLE.has(only) ? only : undefined;
}

/** The request without its override headers (itself when it carries none). */
export function withoutOverride(request: Request): Request {
  if (!METHOD_OVERRIDE_HEADERS.some((h) => request.headers.has(h))) return request;
  const headers = new Headers(request.headers);
  for (const h of METHOD_OVERRIDE_HEADERS) headers.delete(h);
  return new Request(request, { headers });
}
