import { afterEach, describe, expect, it } from "vitest";
import { countedApp, from, middlewareRig } from "../../../test/support/middleware-rig.js";
import { ConfigError, rateLimit, type RateLimitOptions, type SluiceDecision } from "../../index.js";

/** rateLimit() in an app of its own, in Node, against a real Redis behind the Upstash-REST bridge. */
const rig = middlewareRig("rl");
const { db } = rig;

/** The rig's options (a prefix per test, a fresh isolate state, a modest budget) with these limits. */
function options(limits: RateLimitOptions["limits"], extra: Partial<RateLimitOptions> = {}): RateLimitOptions {
  return rig.options({ limits, ...extra });
}

/** An app whose handler answers with the decision it found on the context, and counts its calls. */
const appWith = (opts: RateLimitOptions) => countedApp(rateLimit(opts), (c) => c.json(c.get("sluice")));
const decision = async (res: Response) => (await res.json()) as SluiceDecision;
const problem = async (res: Response) =>
  (await res.json()) as {
    type: string;
    title: string;
    status: number;
    detail: string;
    limit: string;
    retry_after_ms: number;
  };

afterEach(() => db.stack.bridge.setMode("normal"));

describe("rateLimit()", () => {
  it("admits the burst, then refuses with a 429 problem naming the limit, Retry-After and RateLimit headers", async () => {
    const { app, calls } = appWith(options([{ name: "per-ip", rate: 1, period: "1h", burst: 3, lease: false }]));
    for (let i = 0; i < 3; i++) {
      const res = await app.request("/x", from("198.51.100.1"));
      expect(res.status).toBe(200);
      expect(res.headers.get("Sluice-Decision")).toBe("allow");
      expect(res.headers.get("Sluice-Region")).toBe("home");
      expect(res.headers.get("RateLimit-Policy")).toBe('"per-ip";q=1;w=3600;burst=3');
      expect(res.headers.get("RateLimit")).toMatch(new RegExp(`^"per-ip";r=${2 - i};t=\\d+$`));
    }
    const refused = await app.request("/x", from("198.51.100.1"));
    expect(refused.status).toBe(429);
    expect(calls.n).toBe(3);
    expect(refused.headers.get("content-type")).toBe("application/problem+json");
    expect(refused.headers.get("Sluice-Decision")).toBe("reject");
    expect(refused.headers.get("Sluice-Region")).toBe("home");
    // one token an hour: the next one is most of an hour away
    const retryAfter = Number(refused.headers.get("Retry-After"));
    expect(retryAfter).toBeGreaterThan(3_000);
    expect(retryAfter).toBeLessThanOrEqual(3_600);
    expect(refused.headers.get("RateLimit-Policy")).toBe('"per-ip";q=1;w=3600;burst=3');
    expect(refused.headers.get("RateLimit")).toMatch(/^"per-ip";r=0;t=\d+$/);
    const body = await problem(refused);
    expect(body).toMatchObject({
      type: "/__sluice/problems/too-many-requests",
      title: "Too many requests",
      status: 429,
      limit: "per-ip",
    });
    expect(body.detail).toContain('limit "per-ip" of route "app"');
    expect(body.retry_after_ms).toBeGreaterThan(3_000_000);
  });

  it("names the problem type under the configured problem_base", async () => {
    const base = "https://errors.example.com/sluice/";
    const { app } = appWith(options([{ name: "per-ip", rate: 1, period: "1h", lease: false }], { problem_base: base }));
    expect((await app.request("/x", from("198.51.100.7"))).status).toBe(200);
    const refused = await app.request("/x", from("198.51.100.7"));
    expect(refused.status).toBe(429);
    expect((await problem(refused)).type).toBe("https://errors.example.com/sluice/too-many-requests");
  });

  it("keeps one bucket per client IP", async () => {
    const { app } = appWith(options([{ name: "per-ip", rate: 1, period: "1h", burst: 2, lease: false }]));
    expect((await app.request("/x", from("198.51.100.1"))).status).toBe(200);
    expect((await app.request("/x", from("198.51.100.1"))).status).toBe(200);
    expect((await app.request("/x", from("198.51.100.1"))).status).toBe(429);
    const other = await app.request("/x", from("198.51.100.2"));
    expect(other.status).toBe(200);
    expect((await decision(other)).limits[0]?.remaining).toBe(1);
    expect((await app.request("/x", from("198.51.100.1"))).status).toBe(429);
  });

  it("shows the handler the decision, with remaining going down", async () => {
    const { app } = appWith(
      options([{ name: "per-ip", rate: 1, period: "1h", burst: 5, lease: false }], { name: "items" }),
    );
    const seen: number[] = [];
    for (let i = 0; i < 4; i++) {
      const d = await decision(await app.request("/x", from("198.51.100.3")));
      expect(d).toMatchObject({ verdict: "allow", region: "home", route: "items" });
      expect(d.limits).toHaveLength(1);
      expect(d.limits[0]).toMatchObject({ name: "per-ip", allowed: true });
      seen.push(d.limits[0]?.remaining ?? -1);
    }
    expect(seen).toEqual([4, 3, 2, 1]);
  });

  it("decides two limits all or nothing: a refusal by one does not charge the other", async () => {
    const { app, calls } = appWith(
      options([
        { name: "wide", key: "ip", rate: 1, period: "1h", burst: 10, lease: false },
        { name: "narrow", key: "header:x-k", rate: 1, period: "1h", burst: 2, lease: false },
      ]),
    );
    const remaining = (d: SluiceDecision) => Object.fromEntries(d.limits.map((l) => [l.name, l.remaining]));
    expect(remaining(await decision(await app.request("/x", from("198.51.100.4", { "x-k": "a" }))))).toEqual({
      wide: 9,
      narrow: 1,
    });
    expect(remaining(await decision(await app.request("/x", from("198.51.100.4", { "x-k": "a" }))))).toEqual({
      wide: 8,
      narrow: 0,
    });
    // refused by "narrow" three times: "wide" must keep its 8
    for (let i = 0; i < 3; i++) {
      const refused = await app.request("/x", from("198.51.100.4", { "x-k": "a" }));
      expect(refused.status).toBe(429);
      expect((await problem(refused)).limit).toBe("narrow");
    }
    expect(calls.n).toBe(2);
    expect(remaining(await decision(await app.request("/x", from("198.51.100.4", { "x-k": "b" }))))).toEqual({
      wide: 7,
      narrow: 1,
    });
  });

  it("in shadow mode never refuses, but says shadow", async () => {
    const { app, calls } = appWith(
      options([{ name: "per-ip", rate: 1, period: "1h", burst: 1, lease: false }], { shadow: true }),
    );
    const first = await app.request("/x", from("198.51.100.5"));
    expect(first.status).toBe(200);
    expect(first.headers.get("Sluice-Decision")).toBe("allow");
    for (let i = 0; i < 3; i++) {
      const res = await app.request("/x", from("198.51.100.5"));
      expect(res.status).toBe(200);
      expect(res.headers.get("Sluice-Decision")).toBe("shadow");
      const d = await decision(res);
      expect(d.verdict).toBe("shadow");
      expect(d.limits[0]).toMatchObject({ name: "per-ip", allowed: false });
    }
    expect(calls.n).toBe(4);
  });

  describe("when Redis refuses connections", () => {
    const limits: RateLimitOptions["limits"] = [{ name: "per-ip", rate: 1, period: "1h", burst: 2, lease: false }];

    it('"closed": a 503 problem, and the handler is not called', async () => {
      const { app, calls } = appWith(options(limits, { on_store_error: "closed" }));
      db.stack.bridge.setMode("refuse");
      const res = await app.request("/x", from("198.51.100.6"));
      expect(res.status).toBe(503);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      expect(res.headers.get("Retry-After")).toBe("1");
      expect(res.headers.get("Sluice-Decision")).toBe("reject");
      expect((await problem(res)).title).toBe("Rate limiter unavailable");
      expect(calls.n).toBe(0);
    });

    it('"open": the handler runs, degraded', async () => {
      const { app, calls } = appWith(options(limits, { on_store_error: "open" }));
      db.stack.bridge.setMode("refuse");
      for (let i = 0; i < 4; i++) {
        const res = await app.request("/x", from("198.51.100.7"));
        expect(res.status).toBe(200);
        expect(res.headers.get("Sluice-Decision")).toBe("degraded");
        expect((await decision(res)).verdict).toBe("degraded");
      }
      expect(calls.n).toBe(4);
    });

    it('"local": the isolate still enforces the limit', async () => {
      const { app, calls } = appWith(options(limits, { on_store_error: "local" }));
      db.stack.bridge.setMode("refuse");
      for (let i = 0; i < 2; i++) {
        const res = await app.request("/x", from("198.51.100.8"));
        expect(res.status).toBe(200);
        expect(res.headers.get("Sluice-Decision")).toBe("degraded");
        expect(res.headers.get("RateLimit")).toMatch(new RegExp(`^"per-ip";r=${1 - i};t=\\d+$`));
      }
      const refused = await app.request("/x", from("198.51.100.8"));
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get("Retry-After"))).toBeGreaterThan(3_000);
      expect((await problem(refused)).limit).toBe("per-ip");
      expect(calls.n).toBe(2);
      // another client has a local bucket of its own
      expect((await app.request("/x", from("198.51.100.9"))).status).toBe(200);
    });
  });

  it("throws a ConfigError naming the field at construction", () => {
    const bad = (opts: RateLimitOptions) => () => rateLimit(opts);
    expect(bad({ limits: [{ name: "per-ip", rate: 0, period: "1s" }] })).toThrow(ConfigError);
    expect(bad({ limits: [{ name: "per-ip", rate: 0, period: "1s" }] })).toThrow(
      /^rateLimit\(\): limits\[0\] \("per-ip"\)\.rate: /,
    );
    expect(
      bad({
        limits: [
          { name: "ok", rate: 1, period: "1s" },
          // @ts-expect-error -- not a duration: the types refuse it, and so does the schema for JavaScript callers
          { name: "per-ip", rate: 1, period: "soon" },
        ],
      }),
    ).toThrow(/^rateLimit\(\): limits\[1\] \("per-ip"\)\.period: .*"soon" is not a duration/);
    // @ts-expect-error -- not a key part
    expect(bad({ limits: [{ name: "per-ip", key: "body:x", rate: 1, period: "1s" }] })).toThrow(
      /^rateLimit\(\): limits\[0\] \("per-ip"\)\.key/,
    );
    expect(bad({ limits: [{ name: "per ip", rate: 1, period: "1s" }] })).toThrow(
      /^rateLimit\(\): limits\[0\] \("per ip"\)\.name: /,
    );
    const dup = () =>
      rateLimit({
        limits: [
          { name: "a", rate: 1, period: "1s" },
          { name: "a", rate: 2, period: "1s" },
        ],
      });
    expect(dup).toThrow(/^rateLimit\(\): limits\[1\] \("a"\)\.name: duplicate limit name "a"/);
    // a shared option is named as the options spell it
    const storeError = () =>
      rateLimit({ limits: [{ name: "a", rate: 1, period: "1s" }], on_store_error: "sometimes" as "open" });
    expect(storeError).toThrow(/^rateLimit\(\): on_store_error: /);
    const prefix = () => rateLimit({ limits: [{ name: "a", rate: 1, period: "1s" }], key_prefix: "no spaces" });
    expect(prefix).toThrow(/^rateLimit\(\): key_prefix: /);
    try {
      rateLimit({ limits: [{ name: "per-ip", rate: -1, period: "1s" }] });
      expect.unreachable("a negative rate must not construct");
    } catch (e) {
      expect(e).toBeInstanceOf(ConfigError);
      expect((e as ConfigError).field).toBe("rateLimit(): limits[0].rate");
    }
  });

  it("never puts the raw value of a header key in a Redis key", async () => {
    const secret = "sk_live_very-secret-api-key-42";
    const opts = options(
      [{ name: "per-key", key: "header:x-api-key", rate: 1, period: "1h", burst: 2, lease: false }],
      { name: "keyed" },
    );
    const { app } = appWith(opts);
    for (let i = 0; i < 3; i++) await app.request("/x", from("198.51.100.10", { "x-api-key": secret }));
    const keys = await db.redis.keys(`${opts.key_prefix}:*`);
    const bucket = keys.filter((k) => k.startsWith(`${opts.key_prefix}:keyed:per-key:`));
    expect(bucket).toHaveLength(1);
    expect(bucket[0]).toMatch(new RegExp(`^${opts.key_prefix}:keyed:per-key:[0-9a-f]{32}$`));
    for (const k of await db.redis.keys("*")) {
      expect(k).not.toContain(secret);
      expect(k).not.toContain("very-secret");
    }
  });
});
