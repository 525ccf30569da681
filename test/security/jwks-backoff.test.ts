/**
 * An issuer that is down must not be asked again for every token: a failed JWKS fetch counts
 * against the 30 s refetch rule (keys held) or backs off 1 s, 2 s, 4 s … 30 s (no keys held),
 * however many tokens with unknown key ids arrive, and every such token is refused, never admitted.
 */
import { createServer, type Server } from "node:http";
import { sign } from "hono/jwt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { JWKS_REFETCH_MS, JwksCache, type JwksFetch } from "../../src/features/jwt/jwt.js";
import { call, useStack } from "../integration/stack.js";

const URL_ = "https://issuer.test/jwks.json";
const KEY = { kty: "RSA", kid: "k1", n: "AQAB", e: "AQAB" };

/** A fetch that counts its calls and answers what `answer` says at the time. */
function countingFetch(answer: () => Response | Error): { fetch: JwksFetch; calls: () => number } {
  let n = 0;
  return {
    fetch: async () => {
      n++;
      const a = answer();
      if (a instanceof Error) throw a;
      return a;
    },
    calls: () => n,
  };
}

const down = () => new Response("unavailable", { status: 503 });
const up = () => Response.json({ keys: [KEY] });

/** Asks for the keys with a new key id each time; every ask must fail (nothing to verify with). */
async function askAll(cache: JwksCache, n: number, tag: string): Promise<void> {
  const asks = Array.from({ length: n }, (_, i) => cache.keys(URL_, `${tag}-${i}`));
  const settled = await Promise.allSettled(asks);
  expect(settled.every((s) => s.status === "rejected")).toBe(true);
}

describe("JwksCache with an issuer that is down", () => {
  it("fetches once per backoff window while no key set is held, however many tokens arrive", async () => {
    let now = 1_000_000;
    const issuer = countingFetch(down);
    const cache = new JwksCache(issuer.fetch, () => now);
    await askAll(cache, 1, "first");
    expect(issuer.calls()).toBe(1);
    for (let i = 0; i < 100; i++) await askAll(cache, 1, `burst${i}`);
    expect(issuer.calls()).toBe(1); // the old cache fetched 101 times
    // waits of 1 s, 2 s, 4 s … capped at 30 s, each allowing one fetch
    for (const [waitMs, calls] of [
      [999, 1],
      [1, 2],
      [2_000, 3],
      [4_000, 4],
      [8_000, 5],
      [16_000, 6],
      [30_000, 7],
      [29_999, 7],
      [1, 8],
    ] as const) {
      now += waitMs;
      await askAll(cache, 20, `t${now}`);
      expect(issuer.calls()).toBe(calls);
    }
  });

  it("counts a failed refetch for an unknown key id against the 30 s rule, and keeps the held keys", async () => {
    let now = 1_000_000;
    let answer: () => Response = up;
    const issuer = countingFetch(() => answer());
    const cache = new JwksCache(issuer.fetch, () => now);
    expect(await cache.keys(URL_, "k1")).toEqual([KEY]);
    answer = down;
    now += JWKS_REFETCH_MS + 1;
    await expect(cache.keys(URL_, "forged-0")).rejects.toThrow(/503/);
    expect(issuer.calls()).toBe(2);
    for (let i = 1; i <= 50; i++) {
      now += 100;
      // the unknown key id gets the held set (against which it fails), not a fetch
      expect(await cache.keys(URL_, `forged-${i}`)).toEqual([KEY]);
      expect(await cache.keys(URL_, "k1")).toEqual([KEY]);
    }
    expect(issuer.calls()).toBe(2); // the old cache fetched once per forged token
    now += JWKS_REFETCH_MS;
    await expect(cache.keys(URL_, "forged-late")).rejects.toThrow(/503/);
    expect(issuer.calls()).toBe(3);
  });

  it("treats a fetch that throws, or a body without keys, as a failure that backs off", async () => {
    let now = 0;
    let answer: () => Response | Error = () => new Error("connect ECONNREFUSED");
    const issuer = countingFetch(() => answer());
    const cache = new JwksCache(issuer.fetch, () => now);
    await askAll(cache, 1, "refused");
    await askAll(cache, 10, "refused-again");
    expect(issuer.calls()).toBe(1);
    now += 1_000;
    answer = () => Response.json({ nothing: true });
    await askAll(cache, 10, "empty");
    expect(issuer.calls()).toBe(2);
    now += 1_999;
    await askAll(cache, 10, "still");
    expect(issuer.calls()).toBe(2);
    now += 1;
    answer = up;
    expect(await cache.keys(URL_, "k1")).toEqual([KEY]); // back up: the next fetch after the wait succeeds
    expect(issuer.calls()).toBe(3);
  });
});

/** The same attack on the Worker: RS256 tokens with invented key ids while the JWKS endpoint answers 503. */
describe("a Worker whose JWKS endpoint is down", () => {
  let fetched = 0;
  let server: Server;
  let jwksUrl = "";
  const SLUICE = (url: string): SluiceInput => ({
    key_prefix: "jb",
    timeout_ms: 1_000,
    jwt: { alg: "RS256", jwks_url: url },
    routes: [{ name: "me", match: "/me", limits: [{ name: "per-user", key: "jwt:sub", rate: 100, period: "1h" }] }],
  });
  beforeAll(async () => {
    server = createServer((_, res) => {
      fetched++;
      res.writeHead(503, { "content-type": "text/plain" });
      res.end("down");
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    jwksUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}/jwks.json`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));
  const rig = useStack({ origin: {} });

  it("refuses every token with 401 and asks the issuer once per backoff window", async () => {
    const pair = (await crypto.subtle.generateKey(
      { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
      true,
      ["sign", "verify"],
    )) as CryptoKeyPair;
    const privateJwk = await crypto.subtle.exportKey("jwk", pair.privateKey);
    const worker = rig.worker({ sluice: SLUICE(jwksUrl) });
    await worker.ready;
    const started = Date.now();
    const N = 40;
    for (let i = 0; i < N; i++) {
      const key = { ...privateJwk, kid: `invented-${i}`, alg: "RS256" } as Parameters<typeof sign>[1];
      const token = await sign({ sub: `user-${i}`, exp: Math.floor(Date.now() / 1000) + 600 }, key, "RS256");
      const r = await call(worker, "/me", { ip: "198.51.100.7", headers: { authorization: `Bearer ${token}` } });
      expect(r.status).toBe(401);
      expect(r.headers.get("www-authenticate")).toBe('Bearer error="invalid_token"');
    }
    const elapsed = Date.now() - started;
    // fetches may start at 0, 1, 3, 7, 15, 31 … s after the first: that many had their turn
    const turns = [0, 1_000, 3_000, 7_000, 15_000, 31_000].filter((t) => t <= elapsed).length;
    expect(fetched).toBeGreaterThanOrEqual(1);
    expect(fetched).toBeLessThanOrEqual(turns);
    expect(fetched).toBeLessThan(N / 4); // the old Worker fetched once per token
  });
});
