import { decode, verify, verifyWithJwks } from "hono/jwt";
import type { Config } from "../../config/index.js";
import { logFailure } from "../../util/log.js";

/**
 * A bearer token's verification. `signed`, on a refusal: the claims of a token whose signature,
 * issuer and audience verified but whose time claims (`exp`, `nbf`, `iat`) refuse it at this
 * moment. They say who the caller is (an `auto` principal's `sub`: one token is one principal
 * whenever it is checked), never that the request is admitted.
 */
export type Verified =
  { ok: true; claims?: Record<string, unknown> } | { ok: false; detail: string; signed?: Record<string, unknown> };

type JwtSettings = NonNullable<Config["jwt"]>;
type Jwk = NonNullable<Parameters<typeof verifyWithJwks>[1]["keys"]>[number];

const JWKS_TTL_MS = 10 * 60_000;

/**
 * Verifies the request's bearer token with hono's JWT helpers, against the HMAC secret in
 * `secret_env` or the keys at `jwt.jwks_url` (fetched at most every ten minutes per isolate). No
 * token: no claims (the limits' `missing` policy applies). A token that does not verify is an
 * error, never a silent fallback to another identity. The time claims are checked apart, after
 * the signature, issuer and audience: a token refused only by the clock still tells its `signed`
 * claims (see {@link Verified}).
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
  const verification = {
    ...(s.issuer ? { iss: s.issuer } : {}),
    ...(s.audience ? { aud: s.audience } : {}),
    // checked below, once the signature has been: the clock decides admission, never identity
    exp: false,
    nbf: false,
    iat: false,
  };
  let claims: Record<string, unknown>;
  try {
    if (s.jwks_url) {
      const keys = await jwks.keys(s.jwks_url, kidOf(token));
      claims = await verifyWithJwks(token, { keys, verification, allowedAlgorithms: [s.alg as "RS256"] });
    } else {
      if (typeof secret !== "string" || secret === "")
        return { ok: false, detail: `no ${s.secret_env} to verify tokens with` };
      claims = await verify(token, secret, { alg: s.alg, ...verification });
    }
  } catch (e) {
    return { ok: false, detail: `the bearer token did not verify${refusalOf(e)}` };
  }
  const untimely = timeRefusal(claims, Math.floor(Date.now() / 1000));
  if (untimely) return { ok: false, detail: `the bearer token did not verify: ${untimely}`, signed: claims };
  return { ok: true, claims };
}

/**
 * Why hono refused a token, in fixed words: its messages quote the token itself (`invalid JWT
 * token: eyJ…`, `token(…) signature mismatched`) and the configured issuer and audience, none of
 * which a refusal may echo (a client's token in a response is a token in every log of the way).
 */
const REFUSALS: Readonly<Record<string, string>> = {
  JwtTokenInvalid: "it is not a well-formed JWT",
  JwtHeaderInvalid: "it is not a well-formed JWT",
  JwtTokenSignatureMismatched: "its signature does not match",
  JwtTokenIssuer: "its issuer (iss) is not the one expected",
  JwtTokenAudience: "its audience (aud) is not the one expected",
  JwtPayloadRequiresAud: "its audience (aud) is not the one expected",
  JwtAlgorithmMismatch: "its algorithm (alg) is not the one expected",
  JwtAlgorithmNotAllowed: "its algorithm (alg) is not the one expected",
  JwtAlgorithmNotImplemented: "its algorithm (alg) is not the one expected",
  JwtSymmetricAlgorithmNotAllowed: "its algorithm (alg) is not the one expected",
  JwtHeaderRequiresKid: "it names no key (kid)",
};

/** `: <why>` for a refusal hono named, else nothing (a key set that cannot be fetched, anything unforeseen). */
function refusalOf(e: unknown): string {
  const why = e instanceof Error ? REFUSALS[e.name] : undefined;
  return why ? `: ${why}` : "";
}

/**
 * Why the token's time claims refuse it at `now` (seconds since the epoch), or nothing: the
 * checks hono's `verify` makes (RFC 7519 §4.1.4-6), made here after the signature's. A time claim
 * that is present but not a finite number refuses the token.
 */
export function timeRefusal(claims: Record<string, unknown>, now: number): string | undefined {
  const at = (name: string): number | null | undefined => {
    const v = claims[name];
    if (v === undefined) return undefined;
    return typeof v === "number" && Number.isFinite(v) ? v : null;
  };
  const nbf = at("nbf");
  if (nbf === null || (nbf !== undefined && nbf > now)) return "the token is not valid yet (nbf)";
  const exp = at("exp");
  if (exp === null || (exp !== undefined && exp <= now)) return "the token has expired (exp)";
  const iat = at("iat");
  if (iat === null || (iat !== undefined && iat > now)) return "the token was issued in the future (iat)";
  return undefined;
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

/** The fetch the cache uses: the global one, unless a test hands in its own. */
export type JwksFetch = (url: string, init: RequestInit) => Promise<Response>;

/** Least time between two fetches for a key id the held set lacks (the issuer rotated its keys). */
export const JWKS_REFETCH_MS = 30_000;
/** The first wait after a failed fetch; it doubles with each failure in a row, up to JWKS_REFETCH_MS. */
export const JWKS_RETRY_MS = 1_000;
/** How long one fetch may take: an issuer that hangs is a failure, not a request held open. */
const JWKS_FETCH_TIMEOUT_MS = 5_000;

/** What the cache knows of one JWKS URL. */
interface JwksState {
  url: string;
  keys?: Jwk[];
  /** Until when `keys` are used without asking again. */
  until: number;
  /** When the last fetch started, whatever its outcome. */
  attempted: number;
  /** Failed fetches in a row (0 after a success). */
  failures: number;
}

/**
 * The key set, kept ten minutes; fetched again sooner when a token names a key it does not have
 * (the issuer rotated its keys), but no more than once every 30 seconds, so forged key ids cannot
 * make sluice hammer the issuer. A failed fetch counts against the same rule, and while the set
 * cannot be had at all (first fetch, or an expired one) the fetches after a failure wait 1 s,
 * 2 s, 4 s … up to 30 s: an issuer that is down gets one fetch per wait, however many tokens
 * arrive, and each token meanwhile is refused as unverifiable (never admitted).
 */
export class JwksCache {
  private state: JwksState | undefined;

  constructor(
    private readonly fetcher: JwksFetch = (url, init) => fetch(url, init),
    private readonly clock: () => number = Date.now,
  ) {}

  async keys(url: string, kid?: string): Promise<Jwk[]> {
    const now = this.clock();
    const s = this.state?.url === url ? this.state : (this.state = { url, until: 0, attempted: 0, failures: 0 });
    const fresh = s.keys !== undefined && s.until > now ? s.keys : undefined;
    const unknownKid =
      kid !== undefined && fresh !== undefined && !fresh.some((k) => (k as { kid?: string }).kid === kid);
    if (fresh && !unknownKid) return fresh;
    const waitMs = this.waitAfter(s, fresh !== undefined) - (now - s.attempted);
    if (waitMs > 0) {
      if (fresh) return fresh; // the unknown key id fails against the held set
      throw new Error(
        `JWKS ${url} unavailable after ${s.failures} failed fetches; next try in ${Math.ceil(waitMs / 1000)} s`,
      );
    }
    return this.fetchInto(s, now);
  }

  /** How long after the last fetch the next may start: 30 s to look for a new key id, the backoff after failures, else at once. */
  private waitAfter(s: JwksState, holdsKeys: boolean): number {
    if (holdsKeys) return JWKS_REFETCH_MS;
    if (s.failures === 0) return 0;
    return Math.min(JWKS_REFETCH_MS, JWKS_RETRY_MS * 2 ** (s.failures - 1));
  }

  private async fetchInto(s: JwksState, now: number): Promise<Jwk[]> {
    s.attempted = now;
    try {
      const res = await this.fetcher(s.url, {
        headers: { accept: "application/json" },
        signal: AbortSignal.timeout(JWKS_FETCH_TIMEOUT_MS),
      });
      if (!res.ok) {
        await res.body?.cancel();
        throw new Error(`JWKS ${s.url} answered ${res.status}`);
      }
      const body = (await res.json()) as { keys?: unknown };
      if (!Array.isArray(body.keys)) throw new Error(`JWKS ${s.url} holds no "keys" array`);
      Object.assign(s, { keys: body.keys as Jwk[], until: this.clock() + JWKS_TTL_MS, failures: 0 });
      return body.keys as Jwk[];
    } catch (e) {
      s.failures += 1;
      logFailure("jwks_fetch_failed", { url: s.url, failures: s.failures, error: String(e) });
      throw e;
    }
  }
}
