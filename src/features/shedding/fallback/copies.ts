import { hashIdentifier } from "../../../identity/hash.js";

/** The named Workers cache that holds the last good copy of each fallback route's pages. */
export const FALLBACK_CACHE = "sluice-fallback";

const STORED_AT = "sluice-stored-at";
const VARY_NAMES = "sluice-vary";
const ORIGINAL_CACHE_CONTROL = "sluice-cache-control";

/**
 * Where a copy is filed: what the origin was actually asked (host, forward path, query), so that a
 * copy is only ever served for the very resource it came from. Never the matching view of the path
 * (case-folded, `%2F` read as `/`): two URLs that meet the same limit can be two pages at the origin.
 */
export interface CopyAddress {
  /** The host the client asked for: one Worker may serve several tenants. */
  host: string;
  route: string;
  /** The forward path (see `normalisePath`): the path the origin was asked for. */
  path: string;
  search: string;
}

/**
 * Whether a response may be kept as a fallback copy, which any client of the page may later be
 * given: a successful, complete GET response that the origin allows a shared cache to keep
 * (RFC 9111 §3). `no-store`, `private`, `Set-Cookie` and `Vary: *` are never kept. A response to a
 * request with `Authorization` is kept only when the origin says `public`, `s-maxage` or
 * `must-revalidate` (§3.5); a request with a cookie is treated the same unless the route's
 * `fallback_cookies = "shared"` says its pages do not depend on them.
 */
export function isKeepable(request: Request, res: Response, cookies: "private" | "shared"): boolean {
  if (request.method !== "GET" || !res.ok || res.status === 206 || res.headers.has("set-cookie")) return false;
  const cc = directives(res.headers.get("cache-control"));
  if (cc.has("no-store") || cc.has("private")) return false;
  if ((res.headers.get("vary") ?? "").split(",").some((v) => v.trim() === "*")) return false;
  const personal = request.headers.has("authorization") || (cookies === "private" && request.headers.has("cookie"));
  return !personal || cc.has("public") || cc.has("s-maxage") || cc.has("must-revalidate");
}

/** The directive names of a `Cache-Control` value, lower-cased. */
function directives(value: string | null): Set<string> {
  return new Set(
    (value ?? "")
      .split(",")
      .map((d) => (d.split("=")[0] as string).trim().toLowerCase())
      .filter((d) => d !== ""),
  );
}

/**
 * Keeps a copy of `res` for `ttlMs` in the named cache. Responses with `Vary` are filed per value
 * of the varying headers as the origin received them (`originHeaders`, see `originRequest`), with
 * a small manifest at the plain address naming those headers. Meant for `ctx.waitUntil`: the
 * client never waits for it.
 *
 * @example if (isKeepable(req, reply.response, route.fallback_cookies)) defer(keepCopy(address, reply.sent, reply.response.clone(), route.fallback_ttl));
 */
export async function keepCopy(
  address: CopyAddress,
  originHeaders: Headers,
  res: Response,
  ttlMs: number,
): Promise<void> {
  const cache = await caches.open(FALLBACK_CACHE);
  const headers = new Headers(res.headers);
  const original = headers.get("cache-control");
  if (original) headers.set(ORIGINAL_CACHE_CONTROL, original);
  headers.set("cache-control", `public, max-age=${Math.max(1, Math.floor(ttlMs / 1000))}`);
  headers.set(STORED_AT, String(Date.now()));
  const base = baseKey(address);
  const varyNames = varyOf(res);
  if (varyNames.length === 0) {
    await cache.put(base, new Response(res.body, { status: res.status, headers }));
    return;
  }
  const manifest = new Response(null, {
    headers: { [VARY_NAMES]: varyNames.join(","), "cache-control": headers.get("cache-control") as string },
  });
  await Promise.all([
    cache.put(base, manifest),
    cache.put(
      await variantKey(base, varyNames, originHeaders),
      new Response(res.body, { status: res.status, headers }),
    ),
  ]);
}

/**
 * The last good copy for this request, with `Age` set and the origin's own `Cache-Control`
 * restored, or `undefined` when none is kept (or it expired). `originHeaders` are the headers the
 * origin would have received for this request: a variant is chosen as the origin would choose it.
 */
export async function findCopy(
  address: CopyAddress,
  originHeaders: Headers,
  method: string,
): Promise<Response | undefined> {
  const cache = await caches.open(FALLBACK_CACHE);
  const base = baseKey(address);
  let hit = await cache.match(base);
  const varyNames = hit?.headers.get(VARY_NAMES);
  if (hit && varyNames) hit = await cache.match(await variantKey(base, varyNames.split(","), originHeaders));
  if (!hit) return undefined;
  const res = new Response(method === "HEAD" ? null : hit.body, hit);
  const storedAt = Number(res.headers.get(STORED_AT));
  res.headers.set("age", String(Math.max(0, Math.floor((Date.now() - storedAt) / 1000))));
  const original = res.headers.get(ORIGINAL_CACHE_CONTROL);
  if (original) res.headers.set("cache-control", original);
  else res.headers.delete("cache-control");
  for (const h of [STORED_AT, ORIGINAL_CACHE_CONTROL, VARY_NAMES]) res.headers.delete(h);
  return res;
}

function baseKey(a: CopyAddress): string {
  const params = new URLSearchParams(a.search);
  params.sort();
  const query = params.toString();
  return `https://sluice.fallback/${encodeURIComponent(a.host.toLowerCase())}/${a.route}${a.path}${query ? `?${query}` : ""}`;
}

function varyOf(res: Response): string[] {
  return (res.headers.get("vary") ?? "")
    .split(",")
    .map((v) => v.trim().toLowerCase())
    .filter((v) => v !== "")
    .sort();
}

async function variantKey(base: string, names: string[], headers: Headers): Promise<string> {
  const values = await hashIdentifier(JSON.stringify(names.map((n) => [n, headers.get(n)])));
  return `${base}${base.includes("?") ? "&" : "?"}__sluice_vary=${values}`;
}
