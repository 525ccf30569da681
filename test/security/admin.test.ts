/**
 * Security regressions of the admin API, each replaying the attack the review found: names that
 * lost their case on the way in, unthrottled token guessing (bearer and login form), a health
 * route that told anybody about the regions at the price of a Redis PING each, and overrides that
 * skipped the exactness checks a configured limit gets.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import { RespClient } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { hashIdentifier } from "../../src/identity/hash.js";
import {
  call,
  commandCalls,
  startRedisStack,
  startWorker,
  type DemoOrigin,
  type RedisStack,
  useStack,
} from "../integration/stack.js";

const ADMIN = "security-admin-token-0123456789";
const PREFIX = "sa";
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  timeout_ms: 1_000,
  routes: [
    { name: "Checkout", match: "/checkout/*", limits: [{ name: "PerIP", rate: 2, period: "1h" }] },
    {
      name: "windows",
      match: "/windows/*",
      limits: [{ name: "sliding", algorithm: "sliding_window", rate: 10, period: "1s" }],
    },
  ],
};

const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
let stack: RedisStack;
let origin: DemoOrigin;
let mf: Miniflare;
beforeAll(() => {
  ({ stack, origin, mf } = rig);
});

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const admin = (path: string, init: { method?: string; body?: unknown; ip?: string; token?: string } = {}) =>
  call(mf, `/__sluice${path}`, {
    method: init.method ?? "GET",
    ip: init.ip,
    headers: { ...bearer(init.token ?? ADMIN), ...(init.body ? { "content-type": "application/json" } : {}) },
    body: init.body ? JSON.stringify(init.body) : undefined,
  });

/** The dashboard's login form, posted as a browser would, without following its redirect. */
async function login(worker: Miniflare, ip: string, token: string) {
  const res = await worker.dispatchFetch("http://sluice.test/__sluice/login", {
    method: "POST",
    headers: { "CF-Connecting-IP": ip, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ token }).toString(),
    redirect: "manual",
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text };
}

async function redisCommand(args: string[]): Promise<unknown> {
  const client = RespClient.fromUrl(stack.redis.url);
  try {
    const reply = await client.send(args);
    return Array.isArray(reply) ? reply.map(String) : Buffer.isBuffer(reply) ? String(reply) : reply;
  } finally {
    client.close();
  }
}

/** Every command Redis ran, but the INFO calls that count them. */
async function commandsRun(): Promise<{ total: number; ping: number }> {
  const calls = await commandCalls(stack);
  const total = Object.entries(calls).reduce((n, [name, c]) => (name === "info" ? n : n + c), 0);
  return { total, ping: calls.ping ?? 0 };
}

describe("health", () => {
  it("without a token says only that sluice is up, and asks no Redis; with the token or a session, each region", async () => {
    const before = await commandsRun();
    for (let i = 0; i < 5; i++) {
      const r = await call(mf, "/__sluice/health", { ip: "198.18.1.1" });
      expect(r.status).toBe(200);
      expect(r.json()).toEqual({ status: "up" });
      expect(r.text).not.toContain("regions");
    }
    expect(await commandsRun()).toEqual(before); // no PING, no anything

    const full = await admin("/health");
    expect(full.status).toBe(200);
    expect(full.json()).toMatchObject({ ok: true, regions: [{ region: "home", reachable: true }] });
    expect(full.text).not.toContain(stack.bridge.url);
    expect((await commandsRun()).ping).toBeGreaterThan(before.ping);

    const wrong = await admin("/health", { ip: "198.18.1.2", token: "not-the-token" });
    expect([wrong.status, wrong.json()]).toEqual([200, { status: "up" }]);

    const session = (await login(mf, "198.18.1.3", ADMIN)).headers.get("set-cookie")?.split(";")[0] ?? "";
    expect(session).toMatch(/^sluice_admin=\d{13}\.[0-9a-f]{32}\.[0-9a-f]{64}$/);
    const dashboard = await call(mf, "/__sluice/health", { ip: "198.18.1.3", headers: { cookie: session } });
    expect(dashboard.json()).toMatchObject({ regions: [{ region: "home", reachable: true }] }); // the dashboard's region table
  });
});

describe("admin names keep their case", () => {
  it('inspects and resets route "Checkout" limit "PerIP" by the names they are configured with', async () => {
    const ip = "203.0.113.10";
    const seen = origin.seen.length;
    expect((await call(mf, "/checkout/a", { ip })).status).toBe(200);
    expect((await call(mf, "/checkout/a", { ip })).status).toBe(200);
    expect((await call(mf, "/checkout/a", { ip })).status).toBe(429);

    const peek = await admin(`/buckets/Checkout/PerIP?ip=${ip}`);
    expect(peek.status).toBe(200);
    expect(peek.json()).toMatchObject({ route: "Checkout", limit: "PerIP", remaining: 0, would_allow: false });
    // the prefix is still found in any spelling, and the names after it keep theirs
    const tricky = await call(mf, `//__SLUICE/./buckets/Checkout/PerIP/?ip=${ip}`, { headers: bearer(ADMIN) });
    expect(tricky.json()).toMatchObject({ route: "Checkout", limit: "PerIP", remaining: 0 });

    const reset = await admin(`/buckets/Checkout/PerIP?ip=${ip}`, { method: "DELETE" });
    expect(reset.status).toBe(200);
    expect(reset.json().reset).toMatch(new RegExp(`^${PREFIX}:Checkout:PerIP:[0-9a-f]{32}$`));
    expect((await admin(`/buckets/Checkout/PerIP?ip=${ip}`)).json()).toMatchObject({ remaining: 2, would_allow: true });

    expect((await admin(`/buckets/checkout/perip?ip=${ip}`)).status).toBe(404); // names are compared as configured
    expect(origin.seen.length).toBe(seen + 2); // no admin path reached the origin
  });
});

describe("authentication failures are throttled per client", () => {
  it("10 wrong bearer tokens, then the right one from the same IP is a 429; another IP gets in", async () => {
    const attacker = "198.51.100.7";
    for (let i = 0; i < 10; i++)
      expect((await admin("/config", { ip: attacker, token: `guess-${i}` })).status).toBe(401);
    const right = await admin("/config", { ip: attacker });
    expect(right.status).toBe(429);
    expect(right.headers.get("content-type")).toBe("application/problem+json");
    const retryAfter = Number(right.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(right.json()).toMatchObject({ status: 429, retry_after_ms: expect.any(Number) });
    expect(right.json().routes).toBeUndefined(); // nothing of the configuration
    expect((await admin("/health", { ip: attacker })).status).toBe(429); // every route, health with a token too
    expect((await admin("/config", { ip: "198.51.100.8" })).status).toBe(200);

    // the count is in Redis under a hashed name, for one window
    const key = `${PREFIX}:admin-auth:${await hashIdentifier(attacker)}`;
    expect(await redisCommand(["GET", key])).toBe("10"); // refused attempts are not counted on top
    const ttl = Number(await redisCommand(["PTTL", key]));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60_000);
    expect(((await redisCommand(["KEYS", "*"])) as string[]).filter((k) => k.includes(attacker))).toEqual([]);
  });

  it("10 wrong tokens in the login form, then the right one from the same IP is a 429; another IP signs in", async () => {
    const attacker = "198.51.100.9";
    for (let i = 0; i < 10; i++) expect((await login(mf, attacker, `guess-${i}`)).status).toBe(401);
    const right = await login(mf, attacker, ADMIN);
    expect(right.status).toBe(429);
    expect(right.headers.get("content-type")).toBe("application/problem+json");
    expect(Number(right.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(right.headers.get("set-cookie")).toBeNull();
    const other = await login(mf, "198.51.100.10", ADMIN);
    expect(other.status).toBe(303);
    expect(other.headers.get("set-cookie")).toMatch(/^sluice_admin=/);
  });

  it("successful requests never count: 9 failures, any number of successes, and the 10th failure is the limit", async () => {
    const ip = "198.51.100.11";
    for (let i = 0; i < 9; i++) expect((await admin("/config", { ip, token: `guess-${i}` })).status).toBe(401);
    for (let i = 0; i < 5; i++) expect((await admin("/config", { ip })).status).toBe(200);
    expect((await admin("/config", { ip, token: "guess-9" })).status).toBe(401);
    expect((await admin("/config", { ip })).status).toBe(429);
  });

  it("guesses sent all at once: no more than 10 of them are compared", async () => {
    const ip = "198.51.100.12";
    const statuses = (
      await Promise.all(Array.from({ length: 30 }, (_, i) => admin("/config", { ip, token: `guess-${i}` })))
    ).map((r) => r.status);
    expect(statuses.filter((s) => s === 401).length).toBeLessThanOrEqual(10);
    expect(statuses.filter((s) => s !== 401 && s !== 429)).toEqual([]);
    expect((await admin("/config", { ip })).status).toBe(429);
  });

  it("Redis down: no 500, the throttle stays on in the isolate, and a new client is still counted", async () => {
    const own = await startRedisStack();
    const worker = startWorker({
      sluice: SLUICE,
      origin: origin.url,
      redisRestUrl: own.bridge.url,
      bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
    });
    try {
      await worker.ready;
      const get = (ip: string, token: string) => call(worker, "/__sluice/config", { ip, headers: bearer(token) });
      for (let i = 0; i < 10; i++) expect((await get("198.51.100.20", `guess-${i}`)).status).toBe(401);
      expect((await get("198.51.100.20", ADMIN)).status).toBe(429);
      await own.stop();

      expect((await get("198.51.100.20", ADMIN)).status).toBe(429); // what Redis said is remembered
      for (let i = 0; i < 10; i++) expect((await get("198.51.100.21", `guess-${i}`)).status).toBe(401);
      expect((await get("198.51.100.21", ADMIN)).status).toBe(429); // counted in memory meanwhile
      expect((await login(worker, "198.51.100.21", ADMIN)).status).toBe(429);
      expect((await get("198.51.100.22", ADMIN)).status).toBe(200); // the right token still works
    } finally {
      await worker.dispose();
      await own.stop().catch(() => undefined);
    }
  });
});

describe("overrides are checked for exactness like configured limits", () => {
  const put = (body: Record<string, unknown>) =>
    admin("/overrides", { method: "PUT", body: { route: "Checkout", limit: "PerIP", ttl: "1m", ...body } });

  it("a rate, burst or period decide.lua cannot count exactly is a 400 naming the field, and nothing is stored", async () => {
    // 7 per 100000 days: one token is 8.64e15 µs-units, 7 of them pass Number.MAX_SAFE_INTEGER
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ rate: 7, period: "100000d" }, "rate"],
      [{ rate: 1, burst: 7, period: "100000d" }, "burst"],
      [{ rate: 1000, period: "999999999d" }, "period"],
      [{ route: "windows", limit: "sliding", rate: 1_000_000_000, period: "200d" }, "rate"],
    ];
    for (const [body, field] of cases) {
      const r = await put(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.headers.get("content-type")).toBe("application/problem+json");
      expect(r.json().detail, JSON.stringify(body)).toMatch(new RegExp(`^${field}: .*exactly`));
    }
    expect((await admin("/overrides")).json().overrides).toEqual([]);

    expect((await put({ rate: 7, period: "1d" })).status).toBe(200); // an exact one still goes in
    expect((await admin("/overrides", { method: "DELETE", body: { route: "Checkout", limit: "PerIP" } })).status).toBe(
      200,
    );
  });
});
