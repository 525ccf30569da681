import { Hono, type Context, type MiddlewareHandler } from "hono";
import { afterEach, describe, expect, it } from "vitest";
import { background, middlewareRig } from "../../test/support/middleware-rig.js";
import { limiter, rateLimit, type LimiterResult, type LimitState, type SluiceEnv } from "../index.js";

/** Keys from the app's code and the imperative limiter, in Node against a real Redis. */
const { db, options } = middlewareRig("lim");
afterEach(() => db.stack.bridge.setMode("normal"));

const url = (path: string) => `http://sluice.test${path}`;
const from = (ip: string, user?: string): RequestInit => ({
  headers: { "CF-Connecting-IP": ip, ...(user ? { "X-Test-User": user } : {}) },
});

type UserEnv = SluiceEnv & { Variables: { user?: string } };

/** The app's own auth: the user it recognises on the context, none for an anonymous request. */
const auth: MiddlewareHandler<UserEnv> = async (c, next) => {
  const user = c.req.header("X-Test-User");
  if (user) c.set("user", user);
  await next();
};

const keys = async (prefix: string) => db.redis.keys(`${prefix}:*`);

describe("a limit keyed by a function of the context", () => {
  function userApp(missing: "ip" | "reject" | "skip") {
    const opts = options();
    const app = new Hono<UserEnv>();
    app.use("*", auth);
    const limits = [
      {
        name: "per-user",
        key: (c: Context) => c.get("user") as string | undefined,
        rate: 2,
        period: "1h" as const,
        missing,
        lease: false,
      },
    ];
    app.use("*", rateLimit({ ...opts, limits }));
    app.get("/x", (c) => c.text("ok"));
    return { app, prefix: opts.key_prefix };
  }

  it("limits per user, not per IP, and keeps only a hash of the user id in Redis", async () => {
    const { app, prefix } = userApp("ip");
    const statuses = [];
    // one user from three addresses shares one bucket of 2
    for (const ip of ["203.0.113.1", "203.0.113.2", "203.0.113.3"])
      statuses.push((await app.request(url("/x"), from(ip, "alice"))).status);
    expect(statuses).toEqual([200, 200, 429]);
    // another user from the same address has a bucket of its own
    expect((await app.request(url("/x"), from("203.0.113.3", "bob"))).status).toBe(200);
    const names = await keys(prefix);
    expect(names.some((k) => /:per-user:[0-9a-f]{32}/.test(k))).toBe(true);
    expect(names.join(" ")).not.toMatch(/alice|bob/);
  });

  it("treats a request without a user as a missing key: reject is a 400, ip falls back to the address", async () => {
    const rejecting = userApp("reject");
    const anon = await rejecting.app.request(url("/x"), from("203.0.113.9"));
    expect(anon.status).toBe(400);
    expect(await anon.text()).toContain("per-user");
    const falling = userApp("ip");
    const s = [];
    for (let i = 0; i < 3; i++) s.push((await falling.app.request(url("/x"), from("203.0.113.9"))).status);
    expect(s).toEqual([200, 200, 429]);
    expect((await falling.app.request(url("/x"), from("203.0.113.10"))).status).toBe(200);
  });

  it("refuses a key that is neither key parts nor a function, naming the field", () => {
    expect(() => rateLimit({ limits: [{ name: "l", rate: 1, period: "1s", key: 42 as never }] })).toThrow(
      /limits\[0\] \("l"\)\.key/,
    );
  });
});

describe("limiter()", () => {
  const limits = [{ name: "per-user", rate: 3, period: "1h" as const, lease: false }];

  it("admits `rate` calls from a route, then refuses with retryAfterMs, with the middleware's remaining", async () => {
    const opts = options();
    const jobs = limiter({ ...opts, name: "jobs", limits });
    const app = new Hono();
    app.post("/jobs/:user", async (c) => c.json(await jobs.limit(c, c.req.param("user"))));
    const results: LimiterResult[] = [];
    for (let i = 0; i < 4; i++)
      results.push((await (await app.request(url("/jobs/u1"), { method: "POST" })).json()) as LimiterResult);
    expect(results.map((r) => r.success)).toEqual([true, true, true, false]);
    expect(results.map((r) => r.remaining)).toEqual([2, 1, 0, 0]);
    expect(results[3]?.retryAfterMs).toBeGreaterThan(0);
    expect(results[0]?.limit).toBe(3);
    expect(results[0]?.reset).toBeGreaterThan(Date.now() - 1000);
    // the middleware with the same limit says the same remaining after its first request
    const mw = new Hono();
    mw.use("*", rateLimit({ ...options(), limits }));
    mw.get("/x", (c) => c.text("ok"));
    expect(
      (await mw.request(url("/x"), { headers: { "CF-Connecting-IP": "203.0.113.5" } })).headers.get("RateLimit"),
    ).toMatch(new RegExp(`^"per-user";r=${results[0]?.remaining};`));
    const names = await keys(opts.key_prefix);
    expect(names.some((k) => /:jobs:per-user:[0-9a-f]{32}/.test(k))).toBe(true);
    expect(names.join(" ")).not.toContain("u1");
  });

  it("names its reset's unit, the same in the middleware's c.get(\"sluice\"): resetMs the wait, resetAt the instant", async () => {
    const jobs = limiter({ ...options(), limits });
    const mw = new Hono<SluiceEnv>();
    mw.use("*", rateLimit({ ...options(), limits }));
    mw.get("/x", (c) => c.json(c.get("sluice").limits[0]));
    const before = Date.now();
    const call = await jobs.limit({ env: {} }, "u-reset");
    const state = (await (await mw.request(url("/x"), from("203.0.113.6"))).json()) as LimitState;
    const after = Date.now();
    // one of 3 per hour spent: the bucket is full again in 20 minutes
    for (const r of [call, state]) {
      expect(r.resetMs).toBeGreaterThan(19 * 60_000);
      expect(r.resetMs).toBeLessThanOrEqual(20 * 60_000);
      expect(r.resetAt).toBeGreaterThanOrEqual(before + r.resetMs);
      expect(r.resetAt).toBeLessThanOrEqual(after + r.resetMs);
    }
    // `reset` keeps each surface's own meaning: @upstash/ratelimit's instant, the RateLimit header's seconds
    expect(call.reset).toBe(call.resetAt);
    expect(state.reset).toBe(Math.ceil(state.resetMs / 1000));
  });

  it("peek reads without spending; cost spends that many", async () => {
    const jobs = limiter({ ...options(), limits });
    const ctx = { env: {}, executionCtx: background().ctx };
    expect((await jobs.peek(ctx, "u2")).remaining).toBe(3);
    expect((await jobs.peek(ctx, "u2")).remaining).toBe(3);
    expect((await jobs.limit(ctx, "u2", { cost: 2 })).remaining).toBe(1);
    expect((await jobs.peek(ctx, "u2")).remaining).toBe(1);
    expect((await jobs.limit(ctx, "u2", { cost: 2 })).success).toBe(false);
  });

  it("works from a queue consumer's { env, executionCtx }, Redis from env's UPSTASH_REDIS_REST_URL", async () => {
    const { redis, ...rest } = options();
    const jobs = limiter({ ...rest, limits: [{ name: "one", rate: 1, period: "1h", lease: false }] });
    const env = { UPSTASH_REDIS_REST_URL: redis.url, UPSTASH_REDIS_REST_TOKEN: redis.token };
    const bg = background();
    expect((await jobs.limit({ env, executionCtx: bg.ctx }, "msg-sender")).success).toBe(true);
    expect((await jobs.limit({ env, executionCtx: bg.ctx }, "msg-sender")).success).toBe(false);
    await bg.settled();
  });

  it("follows on_store_error when Redis refuses: open admits degraded, local decides in the isolate", async () => {
    const open = limiter({ ...options(), on_store_error: "open", limits });
    const local = limiter({ ...options(), on_store_error: "local", limits });
    db.stack.bridge.setMode("refuse");
    const ctx = { env: {} };
    expect(await open.limit(ctx, "u3")).toMatchObject({ success: true, degraded: true });
    const spent = [];
    for (let i = 0; i < 4; i++) spent.push(await local.limit(ctx, "u3"));
    expect(spent.map((r) => r.success)).toEqual([true, true, true, false]);
    expect(spent.every((r) => r.degraded)).toBe(true);
  });

  it("throws a ConfigError naming the variable when no Redis is configured, never deciding in the isolate", async () => {
    const { redis: _redis, ...rest } = options();
    const jobs = limiter({ ...rest, on_store_error: "local", limits });
    await expect(jobs.limit({ env: {} }, "u4")).rejects.toThrow(
      /^env\.UPSTASH_REDIS_REST_URL: .*set UPSTASH_REDIS_REST_URL/,
    );
    await expect(jobs.peek({ env: { UPSTASH_REDIS_REST_URL: "https://x.example" } }, "u4")).rejects.toMatchObject({
      name: "ConfigError",
      field: "env.UPSTASH_REDIS_REST_TOKEN",
    });
    // a `redis` function that gives nothing is named as such, not as the env variables it replaced
    const given = limiter({ ...rest, redis: () => undefined as never, limits });
    await expect(given.limit({ env: {} }, "u4")).rejects.toMatchObject({ field: "limiter(): redis" });
  });

  it("refuses bad options at construction and a bad identifier or cost at the call", async () => {
    expect(() => limiter({ limits: [{ name: "l", rate: 0, period: "1s" }] })).toThrow(
      /^limiter\(\): limits\[0\] \("l"\)\.rate/,
    );
    expect(() => limiter({ limits: [{ name: "c", algorithm: "concurrency", limit: 2, lease: "1m" }] })).toThrow(
      /^limiter\(\): limits\[0\] \("c"\)\.algorithm/,
    );
    const jobs = limiter({ ...options(), limits });
    await expect(jobs.limit({}, "")).rejects.toThrow(/identifier/);
    await expect(jobs.limit({}, "u", { cost: 0 })).rejects.toThrow(/cost/);
  });
});
