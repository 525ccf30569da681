import { DEFAULT_PATH_POLICY, normalisePath, type PathPolicy } from "./normalise.js";

/** A compiled route pattern: literal segments, `*` for one segment, a trailing `*` for any rest. */
export interface PathPattern {
  segments: string[];
  /** True when the pattern ends in `/*`: the path itself and everything below it match. */
  prefix: boolean;
  /** Under `trailing_slash = "strict"`, whether the pattern ends in a slash (then so must the path). */
  slash: boolean;
}

/**
 * Compiles a route pattern. Patterns go through the same normalisation as request paths, so a
 * pattern and a path that mean the same thing always meet. A pattern's `;parameters` are stripped
 * whatever `paths.parameters` says: paths are matched without them (or refused), so a pattern
 * that kept them could never match.
 *
 * @example compilePattern("/api/products/*") // matches /api/products, /api/products/1, /api/products/1/reviews
 */
export function compilePattern(pattern: string, policy: PathPolicy = DEFAULT_PATH_POLICY): PathPattern {
  const normal = normalisePath(pattern, { ...policy, parameters: "strip" });
  const match = normal.ok ? normal.path.match : pattern;
  const segments = match.split("/").filter((s) => s !== "");
  const prefix = segments[segments.length - 1] === "*";
  return {
    segments: prefix ? segments.slice(0, -1) : segments,
    prefix,
    slash: !prefix && match.length > 1 && match.endsWith("/"),
  };
}

/** Tests a normalised match path (see `normalisePath`) against a compiled pattern. */
export function matchesPattern(pattern: PathPattern, matchPath: string): boolean {
  const segments = matchPath.split("/").filter((s) => s !== "");
  if (pattern.prefix ? segments.length < pattern.segments.length : segments.length !== pattern.segments.length)
    return false;
  if (!pattern.prefix && matchPath.length > 1 && matchPath.endsWith("/") !== pattern.slash) return false;
  return pattern.segments.every((p, i) => p === "*" || p === segments[i]);
}
