/*
 * Where sluice asks the origin what became of an indeterminate key (`idempotency.reconcile`,
 * docs/idempotency-and-sessions.md, Reconciliation): a path on the route's origin, or a full https
 * URL on a host the route may call, with `{key}` standing for the key, URL-encoded.
 */
import { callbackAllowed, type CallbackPattern } from "../../../origin/callback-allowlist.js";
import { joinPaths } from "../../../origin/forward.js";

/** What stands for the request's key (its `Idempotency-Key`, or the derived one) in the template. */
export const KEY_SLOT = "{key}";
const MAX_TEMPLATE = 2_048;

/**
 * Why `template` is no reconcile target, or undefined when it is one: a path (`/orders/by-key/{key}`,
 * not `//host`, no `#`) or an https URL without credentials. The schema's check; the host is
 * checked at load, where the origin is known (`reconcileHostProblem`).
 */
export function reconcileTemplateProblem(template: string): string | undefined {
  if (template.length > MAX_TEMPLATE) return `must be at most ${MAX_TEMPLATE} characters`;
  if (template.includes("#")) return "must not hold a fragment (#)";
  if (template.startsWith("/")) {
    return template.startsWith("//") ? 'must be a path ("/orders/by-key/{key}") or an https URL' : undefined;
  }
  const url = parsed(template);
  if (!url || url.protocol !== "https:" || url.username || url.password)
    return 'must be a path on the route\'s origin ("/orders/by-key/{key}") or an https URL without credentials';
  return undefined;
}

/**
 * A full URL must be on an allowed host, as a queued job's callback must: the origin's own (same
 * scheme, host and port as `ORIGIN_URL`), or one the route's `queue.callbacks` allowlist names.
 * Undefined for a path, or a URL so allowed.
 */
export function reconcileHostProblem(
  template: string,
  origin: URL | undefined,
  callbacks: readonly CallbackPattern[],
): string | undefined {
  if (template.startsWith("/")) return undefined;
  const sample = new URL(template.replaceAll(KEY_SLOT, "k"));
  if (origin && sample.origin === origin.origin) return undefined;
  if (callbackAllowed(sample.href, callbacks)) return undefined;
  return `is on ${sample.host}, which is neither the origin's host nor allowed by the route's queue.callbacks: reconcile answers are trusted only from the origin`;
}

/**
 * The URL to ask about `key`: the template with `{key}` replaced by the key, URL-encoded, a path
 * joined to the origin's (its path prefix kept, as forwarded requests' are). Undefined for a path
 * without an origin to put it on (sluice as middleware in an app without `ORIGIN_URL`), and for the
 * keys `.` and `..`, which no encoding keeps in their path segment (a URL parser resolves them,
 * `%2E` too): such a key is never asked about, and waits for an operator.
 *
 * @example reconcileUrl("/orders/by-key/{key}", new URL("https://api.example.com/v1"), "a b") // "https://api.example.com/v1/orders/by-key/a%20b"
 */
export function reconcileUrl(template: string, origin: URL | undefined, key: string): string | undefined {
  if (key === "." || key === "..") return undefined;
  const filled = template.replaceAll(KEY_SLOT, encodeURIComponent(key));
  if (!template.startsWith("/")) return new URL(filled).href;
  if (!origin) return undefined;
  const [path, query] = splitQuery(filled);
  const url = new URL(origin.href);
  url.pathname = joinPaths(origin.pathname, path);
  url.search = query;
  return url.href;
}

function splitQuery(pathAndQuery: string): [string, string] {
  const at = pathAndQuery.indexOf("?");
  return at < 0 ? [pathAndQuery, ""] : [pathAndQuery.slice(0, at), pathAndQuery.slice(at)];
}

function parsed(text: string): URL | undefined {
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}
