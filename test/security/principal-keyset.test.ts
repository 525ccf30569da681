/**
 * Issue 29, finding 5 made one token one principal whatever the clock says; the review of that fix
 * found it was not so whatever the key set says. With `jwt.jwks_url`, an `auto` principal was the
 * token's `sub` only on an isolate that could fetch the issuer's keys; one that could not (the
 * issuer down for its first fetch, or for the refetch of an expired set) failed the verification
 * and fell to the `Authorization` hash, another principal with other records: the retry of a
 * completed order, same token and key, landing on such an isolate while the issuer's JWKS was
 * down, was forwarded as new. Two orders.
 *
 * Now a guarded request whose JWT cannot be checked at all just now (no key set, or none with its
 * key id that may be fetched yet) is a 503 problem "Identity unavailable" with Retry-After, never
 * another principal; the header's hash stays the principal only where it is the same answer on
 * every isolate: a bearer that is no JWT, or a signature that verifiably fails against the keys.
 */
import { createServer, type Server } from "node:http";
import { sign } from "hono/jwt";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, useStack } from "../integration/stack.js";
import { pollUntil } from "../support/guard-records.js";

let up = true;
let server: Server;
let jwksUrl = "";
let privateJwk: unknown;

beforeAll(async () => {
  const pair = (await crypto.subtle.generateKey(
    { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
    true,
    ["sign", "verify"],
  )) as CryptoKeyPair;
  const publicJwk = { ...(await crypto.subtle.exportKey("jwk", pair.publicKey)), kid: "k1", alg: "RS256", use: "sig" };
  privateJwk = { ...(await crypto.subtle.exportKey("jwk", pair.privateKey)), kid: "k1", alg: "RS256" };
  server = createServer((_, res) => {
    if (!up) {
      res.writeHead(503);
      res.end("down");
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ keys: [publicJwk] }));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  jwksUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}/jwks.json`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const config = (): SluiceInput => ({
  key_prefix: "pks",
  // about who a request is, not latency: a loaded machine must not turn claims into 503s
  timeout_ms: 5_000,
  jwt: { alg: "RS256", jwks_url: jwksUrl },
  routes: [{ name: "orders", match: "/orders", methods: ["POST"], idempotency: {} }],
});

const rig = useStack({});

const post = (w: Miniflare, body: string, authorization: string, key: string) =>
  call(w, "/orders", {
    method: "POST",
    ip: "203.0.113.93",
    body,
    headers: { "content-type": "application/json", authorization, "idempotency-key": key },
  });
const orders = (body: string) => rig.origin.seen.filter((s) => s.body === body).length;
/** The answer is stored after the response (waitUntil): asks until the replay comes back. */
const untilReplayed = (send: () => ReturnType<typeof post>) =>
  pollUntil(send, (r) => r.headers.get("idempotent-replayed") === "true", 15_000);

describe('principal = "auto" with jwks_url: one token, one principal, whatever the key set', () => {
  it("a retry on an isolate that cannot fetch the keys is a 503, never run again; once it can, the replay", async () => {
    const a: Miniflare = rig.worker({ sluice: config() });
    const b: Miniflare = rig.worker({ sluice: config() });
    const token = await sign(
      { sub: "alice", exp: Math.floor(Date.now() / 1000) + 600 },
      privateJwk as unknown as Parameters<typeof sign>[1],
      "RS256",
    );
    const body = '{"order":"r4"}';
    const send = (w: Miniflare) => post(w, body, `Bearer ${token}`, "r4");
    expect((await send(a)).status).toBe(200);
    const replay = await untilReplayed(() => send(a));
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(orders(body)).toBe(1);
    // the issuer's JWKS endpoint fails; the client's retry lands on another isolate
    up = false;
    const retry = await send(b);
    expect(
      orders(body),
      `the retry (same token, same key) must replay or be refused, never run: it answered ${retry.status} replayed=${retry.headers.get("idempotent-replayed")}`,
    ).toBe(1);
    expect(retry.status, retry.text).toBe(503);
    expect(retry.json()).toMatchObject({ title: "Identity unavailable" });
    expect(Number(retry.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // the issuer is back: the same isolate checks the token (after its backoff) and replays the order
    up = true;
    const later = await untilReplayed(() => send(b));
    expect(later.headers.get("idempotent-replayed"), later.text).toBe("true");
    expect(orders(body)).toBe(1);
  }, 60_000);

  it("a bearer that is no JWT is its hash on every isolate, the issuer down or not: its retry replays", async () => {
    const a: Miniflare = rig.worker({ sluice: config() });
    const b: Miniflare = rig.worker({ sluice: config() });
    const body = '{"order":"opaque"}';
    const send = (w: Miniflare) => post(w, body, "Bearer opaque-api-key-0123456789", "r4-opaque");
    up = false;
    try {
      expect((await send(a)).status).toBe(200);
      const replay = await untilReplayed(() => send(b));
      expect(replay.headers.get("idempotent-replayed"), replay.text).toBe("true");
      expect(orders(body)).toBe(1);
    } finally {
      up = true;
    }
  }, 60_000);
});
