import type { Route } from "../config/index.js";
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
