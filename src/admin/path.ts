import { DEFAULT_PATH_POLICY, normalisePath, type PathPolicy } from "../routing/normalise.js";

/** `/__sluice` as a whole first segment, in any case (`/__sluice-jobs/…` is not the admin API). */
const ADMIN_PREFIX = /^\/__sluice(?=\/|$)/i;

/** The default normalisation but case-sensitive, so route and limit names reach the admin API as configured. */
const ADMIN_NAMES: PathPolicy = { ...DEFAULT_PATH_POLICY, case: "sensitive", trailing_slash: "ignore" };

/**
 * The path the admin API routes on, or `undefined` when the request is not for it. The prefix is
 * found in the case-folded normal form, so `//__sluice/x`, `/__SLUICE/x` or `/__sluice;p/x` are
 * the admin API's, never the origin's or the app's; the rest keeps its case (route and limit
 * names may have capitals), loses a trailing slash (`/__sluice/` is the dashboard, as `/__sluice`
 * is) and only the prefix is spelled `/__sluice`. The gateway and `adminApi()` both route on it,
 * so a path answers the same in both.
 *
 * @example adminPath("//__SLUICE/buckets/Checkout/PerIP/") // "/__sluice/buckets/Checkout/PerIP"
 * @example adminPath("/__sluice/") // "/__sluice"
 */
export function adminPath(pathname: string): string | undefined {
  const folded = normalisePath(pathname);
  if (!folded.ok || !ADMIN_PREFIX.test(folded.path.match)) return undefined;
  const named = normalisePath(pathname, ADMIN_NAMES);
  // case-folding changes no segment of an ASCII path, so the same prefix is there in any case
  return named.ok ? named.path.match.replace(ADMIN_PREFIX, "/__sluice") : undefined;
}

/**
 * The request as the admin API takes it (its path in the normal form of `adminPath`), or
 * `undefined` when it is not for the admin API.
 */
export function adminRequest(request: Request): Request | undefined {
  const url = new URL(request.url);
  const path = adminPath(url.pathname);
  if (path === undefined) return undefined;
  url.pathname = path;
  return new Request(url, request);
}
