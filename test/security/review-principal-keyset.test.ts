/**
 * REVIEW (h-review, adversarial read of issue 29's fixes). FAILS on main at e95bf24.
 *
 * R4. Finding 5 made one token one principal whatever the *clock* says, but not whatever the *key
 *     set* says: with `jwt.jwks_url`, an `auto` principal is the token's `sub` only in an isolate
 *     that could fetch the issuer's keys; an isolate that cannot (the issuer down for its first
 *     fetch, or for the refetch of an expired set) fails the verification and falls to the
 *     `Authorization` hash, another principal, another record. The retry of a completed order,
 *     same token and key, landing on another isolate while the issuer's JWKS is down, is
 *     forwarded as new: two orders.
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
  key_prefix: "rpk",
  timeout_ms: 5_000,
  jwt: { alg: "RS256", jwks_url: jwksUrl },
  routes: [{ name: "orders", match: "/orders", methods: ["POST"], idempotency: {} }],
});

const rig = useStack({});

describe("REVIEW R4: an auto principal with jwks_url", () => {
  it("is the token's sub on every isolate: a retry on an isolate that cannot fetch the keys must not run again", async () => {
    const a: Miniflare = rig.worker({ sluice: config() });
    const b: Miniflare = rig.worker({ sluice: config() });
    const token = await sign(
      { sub: "alice", exp: Math.floor(Date.now() / 1000) + 600 },
      privateJwk as unknown as Parameters<typeof sign>[1],
      "RS256",
    );
    const body = '{"order":"r4"}';
    const post = (w: Miniflare) =>
      call(w, "/orders", {
        method: "POST",
        ip: "203.0.113.93",
        body,
        headers: { "content-type": "application/json", authorization: `Bearer ${token}`, "idempotency-key": "r4" },
      });
    const orders = () => rig.origin.seen.filter((s) => s.body === body).length;
    expect((await post(a)).status).toBe(200);
    // stored after the response: until isolate a replays it
    const replay = await pollUntil(
      () => post(a),
      (r) => r.headers.get("idempotent-replayed") === "true",
      10_000,
    );
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(orders()).toBe(1);
    // the issuer's JWKS endpoint fails; the client's retry lands on another isolate
    up = false;
    const retry = await post(b);
    up = true;
    expect(
      orders(),
      `the retry (same token, same key) must replay or be refused, never run: it answered ${retry.status} replayed=${retry.headers.get("idempotent-replayed")}`,
    ).toBe(1);
  }, 60_000);
});
