import { sign } from "hono/jwt";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, type DemoOrigin, sleep, useStack } from "./stack.js";

/**
 * Who a duplicate is, and what makes it one: the default `auto` principal follows the caller's
 * credential across egress IPs (and isolates), and `derive = { fields, window }` makes requests
 * that agree on their business fields one key, whatever Idempotency-Key they carry.
 */
const SECRET = "principal-test-hmac-secret-0123456789";
const API_KEY = "Bearer sk_live_agent_one_7f3a9c";
const OTHER_KEY = "Bearer sk_live_agent_two_91b2e4";
const SLUICE: SluiceInput = {
  key_prefix: "pr",
  // this file is about who a request is, not latency: a loaded machine must not turn claims into 503s
  timeout_ms: 5_000,
  jwt: {},
  routes: [
    { name: "orders", match: "/orders", idempotency: {} },
    {
      name: "verified",
      match: "/verified",
      idempotency: {},
      limits: [{ name: "per-user", key: "jwt:sub", rate: 1_000, period: "1m" }],
    },
    { name: "sess", match: "/sess", session: { key: "header:x-session-id" } },
    {
      name: "create",
      match: "/orders/create",
      // a window is at least the call it guards (the route's origin_timeout)
      origin_timeout: "2s",
      idempotency: { derive: { fields: ["/user_id", "/sku", "/amount"], window: "2s" }, lease: "1s" },
    },
  ],
};

const rig = useStack({ sluice: SLUICE, instances: 2, bindings: { SLUICE_JWT_SECRET: SECRET } });
let origin: DemoOrigin;
let a: Miniflare;
let b: Miniflare;
beforeAll(() => {
  ({ origin } = rig);
  [a, b] = rig.workers as [Miniflare, Miniflare];
});

const inAnHour = () => Math.floor(Date.now() / 1000) + 3_600;
/** Every token minted here, to look for in Redis afterwards. */
const minted: string[] = [];
const bearer = async (claims: Record<string, unknown>, secret = SECRET) => {
  const token = await sign({ exp: inAnHour(), ...claims }, secret, "HS256");
  minted.push(token);
  return `Bearer ${token}`;
};

/** A POST from one client address, with the headers given (Authorization, Idempotency-Key, …). */
const post = (w: Miniflare, path: string, ip: string, body: string, headers: Record<string, string> = {}) =>
  call(w, path, { method: "POST", ip, body, headers: { "content-type": "application/json", ...headers } });
const seenAt = (path: string, marker: string) => origin.seen.filter((s) => s.path === path && s.body.includes(marker));

/** The answer is stored after the response (waitUntil): ask until the replay comes back. */
async function untilReplayed(send: () => ReturnType<typeof post>) {
  let r = await send();
  for (let i = 0; i < 60 && r.headers.get("idempotent-replayed") !== "true"; i++) {
    await sleep(50);
    r = await send();
  }
  return r;
}

describe('principal = "auto" (the default)', () => {
  it("one credential from two egress IPs and two isolates is one principal: the retry is a replay, not a second order", async () => {
    const body = '{"order":"p-1"}';
    const first = await post(a, "/orders?status=201", "198.51.100.1", body, {
      authorization: API_KEY,
      "idempotency-key": "order-1",
    });
    expect(first.status).toBe(201);
    const retry = await untilReplayed(() =>
      post(b, "/orders?status=201", "203.0.113.77", body, { authorization: API_KEY, "idempotency-key": "order-1" }),
    );
    expect(retry.status).toBe(201);
    expect(retry.headers.get("sluice-decision")).toBe("replay");
    expect(retry.text).toBe(first.text);
    expect(seenAt("/orders", "p-1")).toHaveLength(1);

    // another credential with the same key is another caller's request
    const other = await post(b, "/orders?status=201", "203.0.113.77", body, {
      authorization: OTHER_KEY,
      "idempotency-key": "order-1",
    });
    expect(other.headers.get("idempotent-replayed")).toBeNull();
    expect(seenAt("/orders", "p-1")).toHaveLength(2);
  });

  it("without an Authorization header the IP is the principal, as before", async () => {
    const body = '{"order":"p-2"}';
    expect((await post(a, "/orders", "198.51.100.2", body, { "idempotency-key": "order-2" })).status).toBe(200);
    const elsewhere = await post(b, "/orders", "198.51.100.3", body, { "idempotency-key": "order-2" });
    expect(elsewhere.headers.get("idempotent-replayed")).toBeNull();
    expect(seenAt("/orders", "p-2")).toHaveLength(2);
  });

  it("with JWTs verified, the principal is the token's sub: a refreshed token is the same caller, a forged one is not", async () => {
    const body = '{"order":"p-3"}';
    const key = { "idempotency-key": "order-3" };
    const alice = await bearer({ sub: "alice", iat: 1 });
    const aliceRefreshed = await bearer({ sub: "alice", iat: 2, jti: "refreshed" });
    expect(aliceRefreshed).not.toBe(alice);
    expect((await post(a, "/orders", "198.51.100.4", body, { authorization: alice, ...key })).status).toBe(200);
    const refreshed = await untilReplayed(() =>
      post(b, "/orders", "203.0.113.4", body, { authorization: aliceRefreshed, ...key }),
    );
    expect(refreshed.headers.get("sluice-decision")).toBe("replay");
    expect(seenAt("/orders", "p-3")).toHaveLength(1);

    const bob = await post(b, "/orders", "203.0.113.4", body, { authorization: await bearer({ sub: "bob" }), ...key });
    expect(bob.headers.get("idempotent-replayed")).toBeNull();
    // a token that does not verify names no one's sub: it is its own (hashed) credential, never alice's
    const forged = await bearer({ sub: "alice" }, "not-the-secret-at-all-0123456789");
    const mallory = await post(b, "/orders", "198.51.100.4", body, { authorization: forged, ...key });
    expect(mallory.headers.get("idempotent-replayed")).toBeNull();
    expect(seenAt("/orders", "p-3")).toHaveLength(3);
  });

  it("on a route that verifies JWTs for its limits, a token that does not verify is a 401 before any claim", async () => {
    const forged = await bearer({ sub: "alice" }, "not-the-secret-at-all-0123456789");
    const res = await post(a, "/verified", "198.51.100.5", '{"order":"p-4"}', {
      authorization: forged,
      "idempotency-key": "order-4",
    });
    expect(res.status).toBe(401);
    expect(seenAt("/verified", "p-4")).toHaveLength(0);
    const alice = await bearer({ sub: "alice" });
    const ok = await post(a, "/verified", "198.51.100.5", '{"order":"p-4"}', {
      authorization: alice,
      "idempotency-key": "order-4",
    });
    expect(ok.status).toBe(200);
    const retry = await untilReplayed(() =>
      post(b, "/verified", "203.0.113.5", '{"order":"p-4"}', {
        authorization: alice,
        "idempotency-key": "order-4",
      }),
    );
    expect(retry.headers.get("sluice-decision")).toBe("replay");
    expect(seenAt("/verified", "p-4")).toHaveLength(1);
  });

  it("sessions follow the credential too: the same session from a new IP waits its turn, another credential's does not", async () => {
    const session = { "x-session-id": "s-1" };
    const slow = post(a, "/sess", "198.51.100.6", '{"call":"s-first"}', {
      authorization: API_KEY,
      "x-demo-delay": "1500",
      ...session,
    });
    await sleep(300);
    const moved = await post(b, "/sess", "203.0.113.6", '{"call":"s-second"}', { authorization: API_KEY, ...session });
    expect(moved.status).toBe(409);
    expect(moved.json()).toMatchObject({ title: "Session busy" });
    const stranger = await post(b, "/sess", "203.0.113.6", '{"call":"s-third"}', {
      authorization: OTHER_KEY,
      ...session,
    });
    expect(stranger.status).toBe(200);
    expect((await slow).status).toBe(200);
    expect(seenAt("/sess", "s-second")).toHaveLength(0);
  });

  it("keeps credentials out of Redis: no key or value holds the Authorization header or the API key", async () => {
    const keys = (await rig.redis.keys("pr:*")) as string[];
    expect(keys.length).toBeGreaterThan(0);
    // a token's signature is unique to it (its header and claims may be base64 of common JSON)
    const secrets = ["sk_live_agent_one", "sk_live_agent_two", ...minted.map((t) => t.split(".")[2] as string)];
    expect(secrets.length).toBeGreaterThan(4);
    for (const key of keys) {
      const type = String(await rig.redis.type(key));
      const value =
        type === "hash"
          ? await rig.redis.hgetall(key)
          : type === "stream"
            ? await rig.redis.xrange(key, "-", "+")
            : type === "string"
              ? await rig.redis.get(key)
              : null;
      const text = `${key} ${JSON.stringify(value)}`;
      for (const s of secrets) expect(text).not.toContain(s);
    }
  });
});

describe("derive = { fields, window }", () => {
  const order = (fields: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    JSON.stringify({ ...fields, ...extra });

  it("requests that agree on the fields within the window are one order, whatever Idempotency-Key they carry or lack", async () => {
    const fields = { user_id: "u-41", sku: "sku-9", amount: 1999 };
    const first = await post(a, "/orders/create", "198.51.100.7", order(fields, { note: "first" }), {
      authorization: API_KEY,
      "idempotency-key": "agent-attempt-1",
    });
    expect(first.status).toBe(200);
    // the model's retry: a fresh Idempotency-Key, members reordered, another note, another isolate
    const retry = await untilReplayed(() =>
      post(
        b,
        "/orders/create",
        "203.0.113.7",
        order({ amount: 1999, sku: "sku-9", user_id: "u-41" }, { note: "retry" }),
        {
          authorization: API_KEY,
          "idempotency-key": "agent-attempt-2",
        },
      ),
    );
    expect(retry.headers.get("sluice-decision")).toBe("replay");
    expect(retry.text).toBe(first.text);
    const bare = await post(b, "/orders/create", "203.0.113.7", order(fields), { authorization: API_KEY });
    expect(bare.headers.get("idempotent-replayed")).toBe("true");
    expect(seenAt("/orders/create", "u-41")).toHaveLength(1);

    // type-aware: the amount as a string is another value, so another order
    const asText = await post(a, "/orders/create", "198.51.100.7", order({ ...fields, amount: "1999" }), {
      authorization: API_KEY,
    });
    expect(asText.headers.get("idempotent-replayed")).toBeNull();
    expect(seenAt("/orders/create", "u-41")).toHaveLength(2);
  });

  it("after the window the same fields are a new order", async () => {
    const body = order({ user_id: "u-42", sku: "sku-1", amount: 5 });
    expect((await post(a, "/orders/create", "198.51.100.8", body, { authorization: API_KEY })).status).toBe(200);
    const inside = await untilReplayed(() =>
      post(b, "/orders/create", "198.51.100.8", body, { authorization: API_KEY }),
    );
    expect(inside.headers.get("idempotent-replayed")).toBe("true");
    await sleep(2_300);
    const after = await post(b, "/orders/create", "198.51.100.8", body, { authorization: API_KEY });
    expect(after.status).toBe(200);
    expect(after.headers.get("idempotent-replayed")).toBeNull();
    expect(seenAt("/orders/create", "u-42")).toHaveLength(2);
  });

  it("refuses a body without one of the fields, or not JSON, with a 400 problem naming the field", async () => {
    const missing = await post(a, "/orders/create", "198.51.100.9", order({ user_id: "u-43", amount: 5 }), {
      "idempotency-key": "k-43",
    });
    expect(missing.status).toBe(400);
    expect(missing.headers.get("content-type")).toBe("application/problem+json");
    expect(missing.json()).toMatchObject({ title: "Idempotency fields missing", field: "/sku" });
    expect(String(missing.json().detail)).toContain("/sku");
    const notJson = await post(a, "/orders/create", "198.51.100.9", "user_id=u-43&sku=a&amount=5");
    expect(notJson.status).toBe(400);
    expect(notJson.json()).toMatchObject({ title: "Idempotency fields missing" });
    expect(seenAt("/orders/create", "u-43")).toHaveLength(0);
  });
});
