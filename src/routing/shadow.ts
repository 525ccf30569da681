import { matchesPattern, type PathPattern } from "./match.js";
import type { RoutableRoute } from "./route.js";

// Whether a route can ever be the first to match a request (`findRoute`: the first route whose
// pattern and methods match wins). A route is shadowed when every method and path it matches is
// matched by an earlier route: then no request ever meets it. The answer must never be a false
// alarm, so it is decided exactly, on finitely many paths that stand for all of them (see
// `representatives`), or not claimed at all.

/** A method no route names: only a route for every method takes it. */
const UNNAMED_METHOD = "\u0000unnamed";
/** A segment no pattern names at its place: only a `*` there (or a prefix's tail) matches it. */
const UNNAMED_SEGMENT = "\u0000";
/** Past this many paths to look at for one route, no claim is made (a pattern list no one writes by hand). */
const MAX_PATHS = 20_000;

/**
 * What a configuration's whole check may spend, in paths tested against a pattern, shared by its
 * routes (`shadowBudget()`): the check runs where the configuration loads, a Worker's cold start
 * included, so a pathological route list costs milliseconds and its later routes go unclaimed.
 */
export interface ShadowBudget {
  left: number;
}

/** A budget of about a few milliseconds of matching. */
export function shadowBudget(tests = 100_000): ShadowBudget {
  return { left: tests };
}

/**
 * The earlier routes that together take every request `routes[index]` matches, in order, or
 * `undefined` when some request would reach it (or the routes are past what is looked at, or
 * `budget` is spent).
 * `strictSlash`: the paths' policy keeps a trailing slash (`trailing_slash = "strict"`).
 *
 * @example shadowedBy([api("/api/*"), products("/api/products/*", ["GET"])], 1, false) // [api]
 */
export function shadowedBy<R extends RoutableRoute>(
  routes: readonly R[],
  index: number,
  strictSlash: boolean,
  budget: ShadowBudget = shadowBudget(),
): R[] | undefined {
  const route = routes[index];
  const earlier = routes.slice(0, index);
  // a spent budget ends the check before any work: one path per earlier route is the least it costs
  if (!route || earlier.length === 0 || budget.left < earlier.length + 2) return undefined;
  const takers = new Set<R>();
  for (const method of methodsOf(route, earlier)) {
    const candidates = earlier.filter((r) => takes(r, method));
    const paths = representatives(
      route.pattern,
      candidates.map((r) => r.pattern),
      strictSlash,
      budget,
    );
    if (paths === undefined) return undefined;
    for (const path of paths) {
      const first = candidates.find((r) => matchesPattern(r.pattern, path));
      if (!first) return undefined;
      takers.add(first);
    }
  }
  return takers.size > 0 ? earlier.filter((r) => takers.has(r)) : undefined;
}

/** Whether a route takes requests of `method` (as `findRoute` reads it: HEAD counts as GET). */
function takes(route: RoutableRoute, method: string): boolean {
  const methods = route.methods;
  return !methods || methods.includes(method) || (method === "HEAD" && methods.includes("GET"));
}

/**
 * The methods that stand for every method `route` takes: its own (and HEAD with GET); for a route
 * of every method, each one an earlier route names, and one that none names.
 */
function methodsOf(route: RoutableRoute, earlier: readonly RoutableRoute[]): string[] {
  const own = route.methods;
  if (own) return [...new Set([...own, ...(own.includes("GET") ? ["HEAD"] : [])])];
  const named = earlier.flatMap((r) => [...(r.methods ?? []), ...(r.methods?.includes("GET") ? ["HEAD"] : [])]);
  return [...new Set([...named, UNNAMED_METHOD])];
}

/**
 * Paths that stand for every path `pattern` matches, as `others` see them. A pattern tests a
 * segment only against its own literal there (or takes any, with `*`), so two segments none of
 * them names at a place are alike: one of each literal named there and one unnamed segment stand
 * for all. Past the longest pattern no place is tested, and only prefix patterns take longer
 * paths: one more segment stands for any tail. Undefined past MAX_PATHS of them, or past what
 * `budget` has left (which it is charged).
 */
function representatives(
  pattern: PathPattern,
  others: readonly PathPattern[],
  strictSlash: boolean,
  budget: ShadowBudget,
): string[] | undefined {
  const longest = Math.max(pattern.segments.length, ...others.map((p) => p.segments.length));
  const lengths = pattern.prefix ? range(pattern.segments.length, longest + 1) : [pattern.segments.length];
  // the choices look at every other pattern at every place of every length
  budget.left -= lengths.reduce((sum, n) => sum + n, 0) * others.length;
  const choices = lengths.map((n) => range(0, n - 1).map((i) => choicesAt(pattern, others, i)));
  const count = choices.reduce((sum, places) => sum + places.reduce((n, c) => n * c.length, 1), 0);
  const made = count * (strictSlash ? 2 : 1);
  // each path is made, then tested against its own pattern and at most every other
  const cost = made * (others.length + 2);
  if (made > MAX_PATHS || cost > budget.left) return undefined;
  budget.left -= cost;
  const paths: string[] = [];
  for (const places of choices)
    for (const segments of product(places))
      for (const slash of strictSlash && segments.length > 0 ? [false, true] : [false]) {
        const path = "/" + segments.join("/") + (slash ? "/" : "");
        if (matchesPattern(pattern, path)) paths.push(path);
      }
  return paths;
}

/** The segments that stand for every segment at place `i`: the pattern's literal, else each other's and an unnamed one. */
function choicesAt(pattern: PathPattern, others: readonly PathPattern[], i: number): string[] {
  const own = pattern.segments[i];
  if (own !== undefined && own !== "*") return [own];
  const named = others.map((p) => p.segments[i]).filter((s): s is string => s !== undefined && s !== "*");
  return [...new Set(named), UNNAMED_SEGMENT];
}

/** `from` to `to`, both included (none when `to` is below `from`). */
function range(from: number, to: number): number[] {
  return to < from ? [] : Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

/** Every sequence taking one of each place's choices, in order. */
function* product(places: readonly string[][]): Generator<string[]> {
  if (places.length === 0) {
    yield [];
    return;
  }
  const [first, ...rest] = places as [string[], ...string[][]];
  for (const tail of product(rest)) for (const choice of first) yield [choice, ...tail];
}
