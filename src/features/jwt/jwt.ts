import { decode, verify, verifyWithJwks } from "hono/jwt";
import type { Config } from "../../config/index.js";
import { logFailure } from "../../util/log.js";

/**
 * A bearer token's verification. `signed`, on a refusal: the claims of a token whose signature,
 * issuer and audience verified but whose time claims (`exp`, `nbf`, `iat`) refuse it at this
 * moment. They say who the caller is (an `auto` principal's `sub`: one token is one principal
 * whenever it is checked), never that the request is admitted. `unavailable`, on a refusal: the
 * signature could not be checked at all (the key set could not be had, or lacks the token's key
 * id and cannot be fetched again yet): another isolate, or this one a moment later, may verify
 * the same token, so the refusal says nothing about who the caller is.
 */
export type Verified =
  | { ok: true; claims?: Record<string, unknown> }
  | { ok: false; detail: string; signed?: Record<string, unknown>; unavailable?: true };

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
      const header = headerOf(token);
      // a bearer that is no JWT at all is refused the same way wherever it is checked: no key set needed
      if (!header) return { ok: false, detail: "the bearer token is not a JWT" };
      const kid = typeof header.kid === "string" ? header.kid : undefined;
      const set = await jwks.keySet(s.jwks_url, kid).catch((e: unknown) => unavailable((e as Error).message));
      if ("ok" in set) return set;
      if (!set.current) return unavailable(`key id ${JSON.stringify(kid)} is not in the key set held`);
      claims = await verifyWithJwks(token, { keys: set.keys, verification, allowedAlgorithms: [s.alg as "RS256"] });
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

/** A token whose signature cannot be checked just now: refused, and no word on who sent it. */
function unavailable(why: string): Verified & { ok: false } {
  return { ok: false, detail: `the bearer token could not be verified: ${why}`, unavailable: true };
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

/** The token's header, if it decodes as a JWT (its key id names the key its signature is checked with, later). */
function headerOf(token: string): { kid?: unknown } | undefined {
  try {
    return decode(token).header as { kid?: unknown };
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
    return (await this.keySet(url, kid)).keys;
  }

  /**
   * The keys to check a token naming `kid` with, and whether they are `current` for it: the held
   * set has the key id (or the token names none), or was fetched just now to look for it. Not
   * current: the held set lacks the key id and may not be fetched again yet (the 30 s rule), so
   * the token may be signed by a key the issuer added since. Throws while no set can be had.
   */
  async keySet(url: string, kid?: string): Promise<{ keys: Jwk[]; current: boolean }> {
    const now = this.clock();
    const s = this.state?.url === url ? this.state : (this.state = { url, until: 0, attempted: 0, failures: 0 });
    const fresh = s.keys !== undefined && s.until > now ? s.keys : undefined;
    const unknownKid =
      kid !== undefined && fresh !== undefined && !fresh.some((k) => (k as { kid?: string }).kid === kid);
    if (fresh && !unknownKid) return { keys: fresh, current: true };
    const waitMs = this.waitAfter(s, fresh !== undefined) - (now - s.attempted);
    if (waitMs > 0) {
      if (fresh) return { keys: fresh, current: false }; // the unknown key id fails against the held set
      throw new Error(
        `JWKS ${url} unavailable after ${s.failures} failed fetches; next try in ${Math.ceil(waitMs / 1000)} s`,
      );
    }
    return { keys: await this.fetchInto(s, now), current: true };
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
