import { hashIdentifier } from "../keys/hash.js";

/** The named Workers cache that holds the last good copy of each fallback route's pages. */
export const FALLBACK_CACHE = "sluice-fallback";

const STORED_AT = "sluice-stored-at";
const VARY_NAMES = "sluice-vary";
const ORIGINAL_CACHE_CONTROL = "sluice-cache-control";

/** Where a copy is filed: the route and the normalised path and query, never the raw URL. */
export interface CopyAddress {
  route: string;
  /** The normalised match path (see `normalisePath`). */
  path: string;
  search: string;
}

/**
 * Whether a response may be kept as a fallback copy: a successful, complete GET/HEAD response
 * that the origin allows to be shared. `no-store`, `private`, `Set-Cookie` and `Vary: *` are
 * never kept: serving them to another client could leak one user's page to another.
 */
export function isKeepable(method: string, res: Response): boolean {
  if (method !== "GET" || !res.ok || res.status === 206 || res.headers.has("set-cookie")) return false;
  const cc = (res.headers.get("cache-control") ?? "").toLowerCase();
  if (/(^|[,\s])(no-store|private)([,\s=]|$)/.test(cc)) return false;
  return !(res.headers.get("vary") ?? "").split(",").some((v) => v.trim() === "*");
}

/**
 * Keeps a copy of `res` for `ttlMs` in the named cache. Responses with `Vary` are filed per value
 * of the varying request headers, with a small manifest at the plain address naming those
 * headers. Meant for `ctx.waitUntil`: the client never waits for it.
 *
 * @example if (isKeepable(req.method, res)) defer(keepCopy(address, req, res.clone(), route.fallback_ttl));
 */
export async function keepCopy(address: CopyAddress, request: Request, res: Response, ttlMs: number): Promise<void> {
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
  const manifest = new Response(null, { headers: { [VARY_NAMES]: varyNames.join(","), "cache-control": headers.get("cache-control") as string } });
  await Promise.all([cache.put(base, manifest), cache.put(await variantKey(base, varyNames, request), new Response(res.body, { status: res.status, headers }))]);
}

/**
 * The last good copy for this request, with `Age` set and the origin's own `Cache-Control`
 * restored, or `undefined` when none is kept (or it expired).
 */
export async function findCopy(address: CopyAddress, request: Request): Promise<Response | undefined> {
  const cache = await caches.open(FALLBACK_CACHE);
  const base = baseKey(address);
  let hit = await cache.match(base);
  const varyNames = hit?.headers.get(VARY_NAMES);
  if (hit && varyNames) hit = await cache.match(await variantKey(base, varyNames.split(","), request));
  if (!hit) return undefined;
  const res = new Response(request.method === "HEAD" ? null : hit.body, hit);
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
  return `https://sluice.fallback/${a.route}${a.path}${query ? `?${query}` : ""}`;
}

function varyOf(res: Response): string[] {
  return (res.headers.get("vary") ?? "")
    .split(",")
    .map((v) => v.trim().toLowerCase())
    .filter((v) => v !== "")
    .sort();
}

async function variantKey(base: string, names: string[], request: Request): Promise<string> {
  const values = await hashIdentifier(JSON.stringify(names.map((n) => [n, request.headers.get(n)])));
  return `${base}${base.includes("?") ? "&" : "?"}__sluice_vary=${values}`;
}
