import { sign } from "hono/jwt";
import { beforeAll, describe, expect, it } from "vitest";
import { autoPrincipal } from "../../identity/principal.js";
import type { RequestFacts } from "../../identity/identify.js";
import { Problem } from "../../problem.js";
import { JWKS_REFETCH_MS, JwksCache, verifyBearer, type Verified } from "./jwt.js";

/**
 * verifyBearer against a JWKS: which outcomes say who the caller is on every isolate, and which
 * only say that the signature could not be checked here and now (`unavailable`): the key set could
 * not be fetched, or lacks the token's key id and may not be fetched again yet. An `auto` principal
 * is named only by the first kind (the `sub`, or the header's hash); the second is a 503.
 */
const URL_ = "https://issuer.test/jwks.json";
const settings = { secret_env: "SLUICE_JWT_SECRET", alg: "RS256" as const, jwks_url: URL_ };
let publicJwk: Record<string, unknown>;
let privateJwk: Record<string, unknown>;
let otherPrivate: Record<string, unknown>;

beforeAll(async () => {
  const pair = () =>
    crypto.subtle.generateKey(
      { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
      true,
      ["sign", "verify"],
    ) as Promise<CryptoKeyPair>;
  const [mine, other] = [await pair(), await pair()];
  publicJwk = { ...(await crypto.subtle.exportKey("jwk", mine.publicKey)), kid: "k1", alg: "RS256", use: "sig" };
  privateJwk = { ...(await crypto.subtle.exportKey("jwk", mine.privateKey)), kid: "k1", alg: "RS256" };
  otherPrivate = { ...(await crypto.subtle.exportKey("jwk", other.privateKey)), kid: "k1", alg: "RS256" };
});

type Key = Parameters<typeof sign>[1];
const token = (key: Record<string, unknown>, kid = "k1") =>
  sign({ sub: "alice", exp: Math.floor(Date.now() / 1000) + 600 }, { ...key, kid } as unknown as Key, "RS256");
const request = (bearer: string) => new Request("https://sluice.test/", { headers: { authorization: bearer } });
/** A key set served while `up()` says so, else a 503; `now` moves the cache's clock. */
function issuer(up: () => boolean) {
  let now = 1_000_000;
  const cache = new JwksCache(
    async () => (up() ? Response.json({ keys: [publicJwk] }) : new Response("down", { status: 503 })),
    () => now,
  );
  return { cache, advance: (ms: number) => (now += ms) };
}
const verify = (bearer: string, cache: JwksCache) => verifyBearer(request(bearer), settings, undefined, cache);
const facts = (bearer: string, v: Verified): RequestFacts => ({
  ip: "203.0.113.1",
  matchPath: "/",
  headers: new Headers({ authorization: bearer }),
  url: new URL("https://sluice.test/"),
  ...(v.ok ? { claims: v.claims } : v.unavailable ? { unverifiable: v.detail } : { signedClaims: v.signed }),
});

describe("verifyBearer with jwks_url: stable outcomes name a principal, unavailable ones do not", () => {
  it("a token that verifies is its sub; the same token where the keys cannot be fetched is unavailable: a 503, not the hash", async () => {
    const bearer = `Bearer ${await token(privateJwk)}`;
    const ok = await verify(bearer, issuer(() => true).cache);
    expect(ok).toMatchObject({ ok: true, claims: { sub: "alice" } });
    expect(await autoPrincipal(facts(bearer, ok))).toBe('[["jwt:sub","alice"]]');

    const down = await verify(bearer, issuer(() => false).cache);
    expect(down).toMatchObject({ ok: false, unavailable: true });
    const refused = await autoPrincipal(facts(bearer, down)).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(Problem);
    expect((refused as Problem).init).toMatchObject({ headers: { "Retry-After": "1" } });
  });

  it("a key id the held set lacks is unavailable while the set may not be fetched again; once refetched without it, it fails for good", async () => {
    const { cache, advance } = issuer(() => true);
    expect(await verify(`Bearer ${await token(privateJwk)}`, cache)).toMatchObject({ ok: true });
    const rotated = `Bearer ${await token(privateJwk, "k2")}`;
    // the first look for k2 refetches (the set just fetched lacks it): a verifiable failure
    advance(JWKS_REFETCH_MS + 1);
    const fetched = await verify(rotated, cache);
    expect(fetched).toMatchObject({ ok: false });
    expect(fetched.ok === false && fetched.unavailable).toBeFalsy();
    // within the 30 s rule the held set cannot say: unavailable
    advance(1_000);
    expect(await verify(rotated, cache)).toMatchObject({ ok: false, unavailable: true });
  });

  it("what is the same on every isolate names the header's hash: a bearer that is no JWT (no key set asked), a signature that fails", async () => {
    let asked = 0;
    const cache = new JwksCache(async () => (asked++, new Response("down", { status: 503 })));
    const opaque = await verify("Bearer opaque-api-key-0123456789", cache);
    expect(opaque).toMatchObject({ ok: false });
    expect(opaque.ok === false && opaque.unavailable).toBeFalsy();
    expect(asked).toBe(0);
    expect(await autoPrincipal(facts("Bearer opaque-api-key-0123456789", opaque))).toMatch(/authorization:sha256/);

    const forged = `Bearer ${await token(otherPrivate)}`;
    const failed = await verify(forged, issuer(() => true).cache);
    expect(failed).toMatchObject({ ok: false });
    expect(failed.ok === false && (failed.unavailable || failed.signed)).toBeFalsy();
    expect(await autoPrincipal(facts(forged, failed))).toMatch(/authorization:sha256/);
  });
});
