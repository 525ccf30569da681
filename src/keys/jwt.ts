import { decode, verify, verifyWithJwks } from "hono/jwt";
import type { Config, Route } from "../config/index.js";

export type Verified = { ok: true; claims?: Record<string, unknown> } | { ok: false; detail: string };

type JwtSettings = NonNullable<Config["jwt"]>;
type Jwk = NonNullable<Parameters<typeof verifyWithJwks>[1]["keys"]>[number];

const JWKS_TTL_MS = 10 * 60_000;

/** Whether any limit of the route keys (or takes its tier) on a JWT claim, or its session lock, idempotency principal or priority does. */
export function usesJwt(
  route: Pick<Route, "limits" | "session" | "idempotency"> & Partial<Pick<Route, "priority">>,
): boolean {
  const session = route.session ? [route.session.key, ...route.session.principal] : [];
  const principal = route.idempotency?.principal ?? [];
  const priority = route.priority ?? "";
  return [...route.limits.flatMap((l) => [...l.key, l.tier ?? ""]), ...session, ...principal, priority].some((p) =>
    p.startsWith("jwt:"),
  );
}

/**
 * Verifies the request's bearer token with hono's JWT helpers, against the HMAC secret in
 * `secret_env` or the keys at `jwks_url` (fetched at most every ten minutes per isolate). No
 * token: no claims (the limits' `missing` policy applies). A token that does not verify is an
 * error, never a silent fallback to another identity.
 */
export async function verifyBearer(
  request: Request,
  settings: JwtSettings | undefined,
  secret: unknown,
  jwks: JwksCache,
): Promise<Verified> {
  const auth = request.headers.get("authorization");
  if (!auth) return { ok: true };
  const m = /^Bearer\s+([A-Za-z0-9._~+/=-]+)$/i.exec(auth.trim());
  if (!m) return { ok: false, detail: "the Authorization header is not a bearer token" };
  const token = m[1] as string;
  const s = settings ?? { secret_env: "SLUICE_JWT_SECRET", alg: "HS256" as const };
  const verification = { ...(s.issuer ? { iss: s.issuer } : {}), ...(s.audience ? { aud: s.audience } : {}) };
  try {
    if (s.jwks_url) {
      const keys = await jwks.keys(s.jwks_url, kidOf(token));
      const claims = await verifyWithJwks(token, { keys, verification, allowedAlgorithms: [s.alg as "RS256"] });
      return { ok: true, claims: claims as Record<string, unknown> };
    }
    if (typeof secret !== "string" || secret === "")
      return { ok: false, detail: `no ${s.secret_env} to verify tokens with` };
    const claims = await verify(token, secret, { alg: s.alg, ...verification });
    return { ok: true, claims: claims as Record<string, unknown> };
  } catch (e) {
    return { ok: false, detail: `the bearer token did not verify: ${(e as Error).message}` };
  }
}

/**
 * The claims a bearer token states, unverified: only ever matched against deny entries (a
 * client that forges them can refuse no one but itself), never trusted as an identity.
 */
export function statedClaims(request: Request): Record<string, unknown> | undefined {
  const m = /^Bearer\s+(\S+)$/i.exec((request.headers.get("authorization") ?? "").trim());
  if (!m) return undefined;
  try {
    const payload = decode(m[1] as string).payload as unknown;
    return payload && typeof payload === "object" ? (payload as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** The token's key id, if it names one (its signature is checked later, against the key set). */
function kidOf(token: string): string | undefined {
  try {
    const kid = decode(token).header.kid;
    return typeof kid === "string" ? kid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The key set, kept ten minutes; fetched again sooner when a token names a key it does not have
 * (the issuer rotated its keys), but no more than once every 30 seconds, so forged key ids cannot
 * make sluice hammer the issuer.
 */
export class JwksCache {
  private held: { url: string; keys: Jwk[]; until: number; fetched: number } | undefined;

  async keys(url: string, kid?: string): Promise<Jwk[]> {
    const now = Date.now();
    const cached = this.held && this.held.url === url && this.held.until > now ? this.held : undefined;
    const unknownKid =
      kid !== undefined && cached !== undefined && !cached.keys.some((k) => (k as { kid?: string }).kid === kid);
    if (cached && !(unknownKid && now - cached.fetched > 30_000)) return cached.keys;
    const res = await fetch(url, { headers: { accept: "application/json" } });
    if (!res.ok) throw new Error(`JWKS ${url} answered ${res.status}`);
    const body = (await res.json()) as { keys?: Jwk[] };
    this.held = { url, keys: body.keys ?? [], until: Date.now() + JWKS_TTL_MS, fetched: Date.now() };
    return this.held.keys;
  }
}
