import { sign } from "hono/jwt";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import { RespClient } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, commandCalls, startWorker, type DemoOrigin, type RedisStack, useStack } from "./stack.js";

const SECRET = "test-jwt-secret-0123456789";
const hour = { period: "1h" };
const SLUICE: SluiceInput = {
  key_prefix: "p",
  timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
  routes: [
    { name: "me", match: "/me", limits: [{ name: "per-user", key: "jwt:sub", rate: 2, ...hour }] },
    {
      name: "strict-me",
      match: "/strict-me",
      limits: [{ name: "per-user", key: "jwt:sub", rate: 2, ...hour, missing: "reject" }],
    },
    {
      name: "plans",
      match: "/plans",
      limits: [
        {
          name: "per-plan",
          key: "jwt:sub",
          tier: "jwt:plan",
          rates: { free: "2/1h", premium: "5/1h" },
          rate: 1,
          ...hour,
        },
      ],
    },
    { name: "quota", match: "/quota", peek: "plans" },
    {
      name: "weighted",
      match: "/weighted",
      limits: [{ name: "units", key: "ip", rate: 10, ...hour, cost: "header:x-cost", max_cost: 5 }],
    },
    {
      name: "keyed",
      match: "/keyed",
      limits: [{ name: "per-key", key: "header:x-api-key", rate: 1, ...hour, missing: "skip" }],
    },
    {
      name: "paced",
      match: "/paced",
      limits: [
        { name: "smooth", key: "ip", algorithm: "leaky_bucket", rate: 2, period: "1s", burst: 3, max_delay: "2s" },
      ],
    },
    {
      name: "bursty",
      match: "/bursty",
      limits: [
        { name: "smooth", key: "ip", algorithm: "leaky_bucket", rate: 10, period: "1s", burst: 3, nodelay: true },
      ],
    },
    {
      name: "mixed",
      match: "/mixed",
      limits: [
        { name: "tb", key: "ip", rate: 100, ...hour },
        { name: "lb", key: "ip", algorithm: "leaky_bucket", rate: 100, period: "1s", burst: 50, nodelay: true },
        { name: "fw", key: "ip", algorithm: "fixed_window", rate: 100, period: "1h" },
        { name: "sw", key: "ip", algorithm: "sliding_window", rate: 3, period: "1h" },
      ],
    },
  ],
};

const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_JWT_SECRET: SECRET } });
let stack: RedisStack;
let origin: DemoOrigin;
let mf: Miniflare;
beforeAll(() => {
  ({ stack, origin, mf } = rig);
});

const now = () => Math.floor(Date.now() / 1000);
const token = (claims: Record<string, unknown>, secret = SECRET) =>
  sign({ exp: now() + 600, ...claims }, secret, "HS256");
const bearer = async (claims: Record<string, unknown>, secret?: string) => ({
  authorization: `Bearer ${await token(claims, secret)}`,
});

describe("JWT identities", () => {
  it("a valid token keys the bucket on its claim, whatever the IP", async () => {
    const alice = await bearer({ sub: "alice" });
    expect((await call(mf, "/me", { ip: "10.0.0.1", headers: alice })).status).toBe(200);
    expect((await call(mf, "/me", { ip: "10.0.0.2", headers: alice })).status).toBe(200);
    expect((await call(mf, "/me", { ip: "10.0.0.3", headers: alice })).status).toBe(429);
    expect((await call(mf, "/me", { ip: "10.0.0.3", headers: await bearer({ sub: "bob" }) })).status).toBe(200);
  });

  it.each([
    [
      "expired",
      async () => ({ authorization: `Bearer ${await sign({ sub: "alice", exp: now() - 60 }, SECRET, "HS256")}` }),
    ],
    ["signed with another key", () => bearer({ sub: "alice" }, "not-the-secret")],
    ["not a JWT", async () => ({ authorization: "Bearer not.a.jwt" })],
    ["not a bearer token", async () => ({ authorization: "Basic YTpi" })],
  ])("a token %s is a 401 problem, never a fallback to another identity", async (_, headers) => {
    const r = await call(mf, "/me", { ip: "10.0.1.1", headers: await headers() });
    expect(r.status).toBe(401);
    expect(r.headers.get("content-type")).toBe("application/problem+json");
    expect(r.headers.get("www-authenticate")).toMatch(/^Bearer/);
  });

  it("no token: missing = ip falls back to the IP; missing = reject is a 400 problem", async () => {
    expect((await call(mf, "/me", { ip: "10.0.2.1" })).status).toBe(200);
    expect((await call(mf, "/me", { ip: "10.0.2.1" })).status).toBe(200);
    expect((await call(mf, "/me", { ip: "10.0.2.1" })).status).toBe(429);
    const r = await call(mf, "/strict-me", { ip: "10.0.2.1" });
    expect(r.status).toBe(400);
    expect(r.json()).toMatchObject({ limit: "per-user" });
  });

  it("missing = skip leaves the limit out", async () => {
    for (let i = 0; i < 3; i++) expect((await call(mf, "/keyed", { ip: "10.0.3.1" })).status).toBe(200);
    expect((await call(mf, "/keyed", { headers: { "x-api-key": "k" } })).status).toBe(200);
    expect((await call(mf, "/keyed", { headers: { "x-api-key": "k" } })).status).toBe(429);
  });
});

describe("JWKS", () => {
  it("verifies RS256 tokens against the keys at jwks_url", async () => {
    const { createServer } = await import("node:http");
    const pair = (await crypto.subtle.generateKey(
      { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
      true,
      ["sign", "verify"],
    )) as CryptoKeyPair;
    const publicJwk = {
      ...(await crypto.subtle.exportKey("jwk", pair.publicKey)),
      kid: "k1",
      alg: "RS256",
      use: "sig",
    };
    const privateJwk = { ...(await crypto.subtle.exportKey("jwk", pair.privateKey)), kid: "k1", alg: "RS256" };
    let fetched = 0;
    const server = createServer((_, res) => {
      fetched++;
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ keys: [publicJwk] }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const jwksUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}/jwks.json`;
    const worker = startWorker({
      sluice: { ...SLUICE, jwt: { alg: "RS256", jwks_url: jwksUrl } },
      origin: origin.url,
      redisRestUrl: stack.bridge.url,
    });
    try {
      const good = await sign({ sub: "rsa-user", exp: now() + 600 }, privateJwk as Parameters<typeof sign>[1], "RS256");
      expect((await call(worker, "/me", { headers: { authorization: `Bearer ${good}` } })).status).toBe(200);
      expect((await call(worker, "/me", { headers: { authorization: `Bearer ${good}` } })).status).toBe(200);
      expect((await call(worker, "/me", { headers: { authorization: `Bearer ${good}` } })).status).toBe(429);
      const forged = await sign({ sub: "rsa-user", exp: now() + 600 }, SECRET, "HS256");
      expect((await call(worker, "/me", { headers: { authorization: `Bearer ${forged}` } })).status).toBe(401);
      expect(fetched).toBe(1); // the key set is kept, not fetched per request
    } finally {
      await worker.dispose();
      server.close();
    }
  });
});

describe("tiers", () => {
  it("take the rate from the claim's tier, and the limit's own rate without one", async () => {
    const count = async (claims: Record<string, unknown>) => {
      const headers = await bearer(claims);
      let n = 0;
      while (n < 10 && (await call(mf, "/plans", { headers })).status === 200) n++;
      return n;
    };
    expect(await count({ sub: "f1", plan: "free" })).toBe(2);
    expect(await count({ sub: "p1", plan: "premium" })).toBe(5);
    expect(await count({ sub: "n1" })).toBe(1);
    expect(await count({ sub: "u1", plan: "unknown" })).toBe(1);
  });

  it("a peek route reads another route's buckets without spending", async () => {
    const headers = await bearer({ sub: "p2", plan: "premium" });
    expect((await call(mf, "/plans", { headers })).status).toBe(200);
    for (let i = 0; i < 3; i++) {
      const q = await call(mf, "/quota", { headers });
      expect(q.status).toBe(200);
      expect(q.headers.get("ratelimit")).toMatch(/^"per-plan";r=4;/);
    }
    expect((await call(mf, "/plans", { headers })).headers.get("ratelimit")).toMatch(/^"per-plan";r=3;/);
  });
});

describe("weighted costs", () => {
  it("take the cost from a header, bounded by max_cost", async () => {
    const ip = "10.0.4.1";
    const send = (cost?: string) => call(mf, "/weighted", { ip, headers: cost ? { "x-cost": cost } : {} });
    expect((await send("4")).status).toBe(200);
    expect((await send("4")).status).toBe(200);
    expect((await send("4")).status).toBe(429); // 2 left
    expect((await send()).status).toBe(200); // no header: 1
    expect((await send("1")).status).toBe(200);
    for (const bad of ["6", "0", "-1", "abc", "1.5"]) expect((await send(bad)).status, bad).toBe(400);
  });
});

describe("leaky bucket in the Worker", () => {
  it("spaces requests at the rate: each waits for its slot, and past the burst they are refused", async () => {
    const sent = Date.now();
    const results = await Promise.all(
      Array.from({ length: 5 }, () =>
        call(mf, "/paced", { ip: "10.0.5.1" }).then((r) => ({ ...r, answeredBy: Date.now() - sent })),
      ),
    );
    const admitted = results
      .filter((r) => r.status === 200)
      .map((r) => ({ delay: Number(r.headers.get("sluice-delay-ms") ?? 0), answeredBy: r.answeredBy }))
      .sort((a, b) => a.delay - b.delay);
    // The five were decided between the send and each answer less its wait: within `spread` ms of
    // each other (under 250 on an idle machine). Slot k is k × 500 ms after the first, less the
    // moments between the decisions; the burst (3) and the one being served pass, the rest are
    // refused, but for a slot the bucket leaked meanwhile (one per 500 ms).
    const spread = Math.max(...admitted.map((a) => a.answeredBy - a.delay));
    expect(admitted.length).toBeGreaterThanOrEqual(4);
    expect(admitted.length).toBeLessThanOrEqual(4 + Math.floor(spread / 500));
    admitted.forEach(({ delay }, k) => {
      expect(delay).toBeLessThanOrEqual(k * 500);
      expect(delay).toBeGreaterThan(k * 500 - Math.max(250, spread));
    });
    expect(results.filter((r) => r.status === 429)).toHaveLength(5 - admitted.length);
  });

  it("with nodelay the burst passes at once and slots still refill at the rate", async () => {
    const sent = Date.now();
    const results = await Promise.all(Array.from({ length: 5 }, () => call(mf, "/bursty", { ip: "10.0.5.2" })));
    // decided within `spread` ms of each other: the bucket leaked a slot per 100 ms of it
    const spread = Date.now() - sent;
    const passed = results.filter((r) => r.status === 200 && r.headers.get("sluice-delay-ms") === null).length;
    expect(passed).toBeGreaterThanOrEqual(4);
    expect(passed).toBeLessThanOrEqual(4 + Math.floor(spread / 100));
    expect(results.filter((r) => r.status === 429)).toHaveLength(5 - passed);
    await new Promise((r) => setTimeout(r, 250));
    expect((await call(mf, "/bursty", { ip: "10.0.5.2" })).status).toBe(200); // a slot refilled after 100 ms
  });
});

describe("four algorithms in one route", () => {
  it("cost one EVALSHA per decision and stay all or nothing", async () => {
    const ip = "10.0.6.1";
    const before = await commandCalls(stack);
    for (let i = 0; i < 3; i++) expect((await call(mf, "/mixed", { ip })).status).toBe(200);
    const refused = await call(mf, "/mixed", { ip });
    expect(refused.status).toBe(429);
    expect(refused.json().limit).toBe("sw");
    const after = await commandCalls(stack);
    expect((after.evalsha ?? 0) - (before.evalsha ?? 0)).toBe(4);
    // the refused request charged none of the other three: the fixed window still counts 3
    const resp = RespClient.fromUrl(stack.redis.url);
    try {
      const [key] = ((await resp.send(["KEYS", "p:mixed:fw:*"])) as Buffer[]).map(String);
      expect(String(await resp.send(["GET", key as string]))).toMatch(/^f:3:\d+$/);
      const [tb] = ((await resp.send(["KEYS", "p:mixed:tb:*"])) as Buffer[]).map(String);
      expect(Math.floor(Number(String(await resp.send(["GET", tb as string])).split(":")[0]) / 36_000_000)).toBe(97);
    } finally {
      resp.close();
    }
  });
});
