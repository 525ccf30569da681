import { Hono } from "hono";
import { describe, expect, it, vi } from "vitest";
import { background, countedApp, middlewareRig, TIMEOUT_MS } from "../../test/support/middleware-rig.js";
import {
  breaker,
  ConfigError,
  idempotency,
  rateLimit,
  Runtime,
  session,
  sluice,
  type SluiceConfig,
  type SluiceDecision,
  type SluiceEnv,
} from "../index.js";

/** sluice(config), the whole gateway as one middleware, and the middleware composed in an app, in Node against a real Redis. */
const { db, connection, options, prefix } = middlewareRig("gw");

/** An app behind sluice(config) whose handler answers with the decision it found; `calls` counts its runs. */
function gatewayApp(config: SluiceConfig) {
  return countedApp(sluice({ timeout_ms: TIMEOUT_MS, ...config }, connection()), async (c) => {
    const body = c.req.method === "POST" ? await c.req.text() : "";
    return c.json({ decision: c.get("sluice"), path: new URL(c.req.url).pathname, body });
  });
}

interface Answer {
  decision: SluiceDecision;
  path: string;
  body: string;
}

const url = (path: string) => `http://sluice.test${path}`;
const from = (ip: string, init: RequestInit = {}): RequestInit => ({
  ...init,
  headers: { "CF-Connecting-IP": ip, ...(init.headers as Record<string, string> | undefined) },
});

describe("sluice(config) and method-override headers", () => {
  const limits = [{ name: "per-ip", rate: 1, period: "1h", burst: 1, lease: false }];
  const override = { "X-HTTP-Method-Override": "DELETE" };
  /** The handler's view: the method it got and whether the override header reached it. */
  function overrideApp(methodOverride: boolean) {
    const routes = [
      { name: "deletes", match: "/items/*", methods: ["DELETE"], method_override: methodOverride, limits },
    ];
    return countedApp(sluice({ timeout_ms: TIMEOUT_MS, key_prefix: prefix(), routes }, connection()), (c) =>
      c.json({ method: c.req.method, override: c.req.header("x-http-method-override") ?? null }),
    );
  }

  it("by default the handler gets no override header: past an empty DELETE limit a POST stays a POST", async () => {
    const { app } = overrideApp(false);
    expect((await app.request(url("/items/1"), from("198.51.100.120", { method: "DELETE" }))).status).toBe(200);
    expect((await app.request(url("/items/1"), from("198.51.100.120", { method: "DELETE" }))).status).toBe(429);
    const res = await app.request(url("/items/1"), from("198.51.100.120", { method: "POST", headers: override }));
    expect(await res.json()).toEqual({ method: "POST", override: null });
  });

  it("a route with method_override decides the POST as the DELETE it asks to be, and passes the header on", async () => {
    const { app, calls } = overrideApp(true);
    const first = await app.request(url("/items/1"), from("198.51.100.121", { method: "POST", headers: override }));
    expect(await first.json()).toEqual({ method: "POST", override: "DELETE" });
    expect((await app.request(url("/items/1"), from("198.51.100.121", { method: "DELETE" }))).status).toBe(429);
    expect(calls.n).toBe(1);
  });
});

describe("sluice(config)", () => {
  const routes: SluiceConfig["routes"] = [
    { name: "x", match: "/api/x", limits: [{ name: "per-ip", rate: 1, period: "1h", burst: 3, lease: false }] },
    { name: "y", match: "/api/y/*", limits: [{ name: "per-ip", rate: 1, period: "1h", burst: 1, lease: false }] },
  ];

  it("matches routes on the normalised path: //API/x and /api/x/ spend the bucket of /api/x", async () => {
    const { app, calls } = gatewayApp({ key_prefix: prefix(), routes });
    const left: number[] = [];
    for (const spelling of ["/api/x", "//API/x", "/api/x/"]) {
      const res = await app.request(url(spelling), from("198.51.100.110"));
      expect(res.status).toBe(200);
      const { decision } = (await res.json()) as Answer;
      expect(decision.route).toBe("x");
      left.push(decision.limits[0]?.remaining ?? -1);
    }
    expect(left).toEqual([2, 1, 0]);
    const refused = await app.request(url("/Api//X/"), from("198.51.100.110"));
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { detail: string }).detail).toContain('of route "x"');
    expect(calls.n).toBe(3);

    // the other route has buckets of its own
    const y = await app.request(url("/api/y/1"), from("198.51.100.110"));
    expect(y.status).toBe(200);
    expect(((await y.json()) as Answer).decision).toMatchObject({
      route: "y",
      limits: [{ name: "per-ip", remaining: 0 }],
    });
    expect((await app.request(url("/API/Y/2"), from("198.51.100.110"))).status).toBe(429);
  });

  it("lets a path no route matches through untouched", async () => {
    const { app, calls } = gatewayApp({ key_prefix: prefix(), routes });
    for (let i = 0; i < 5; i++) {
      const res = await app.request(url("/health/ready"), from("198.51.100.111", { method: "POST", body: "ping" }));
      expect(res.status).toBe(200);
      expect(res.headers.get("RateLimit")).toBeNull();
      expect(res.headers.get("RateLimit-Policy")).toBeNull();
      expect(res.headers.get("Sluice-Decision")).toBe("allow");
      const answer = (await res.json()) as Answer;
      expect(answer).toMatchObject({ path: "/health/ready", body: "ping" });
      expect(answer.decision.route).toBeUndefined();
      expect(answer.decision.limits).toEqual([]);
    }
    expect(calls.n).toBe(5);
  });

  it("refuses a path it cannot normalise with a 400 problem, stamped with the region", async () => {
    const { app, calls } = gatewayApp({ key_prefix: prefix(), routes, paths: { parameters: "reject" } });
    const res = await app.request(url("/api/x;jsessionid=1"), from("198.51.100.112"));
    expect(res.status).toBe(400);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(res.headers.get("Sluice-Region")).toBe("home");
    expect(((await res.json()) as { title: string }).title).toBe("Bad request path");
    expect(calls.n).toBe(0);
  });

  it("applies the deny list, and lets an allow-listed client skip the route's limits", async () => {
    const key_prefix = prefix();
    const until = Date.now() + 600_000;
    await db.redis.hset(`${key_prefix}:lists`, {
      "deny:198.51.100.113": JSON.stringify({ kind: "deny", entry: "198.51.100.113", until }),
      "allow:198.51.100.114": JSON.stringify({ kind: "allow", entry: "198.51.100.114", until, routes: ["x"] }),
    });
    const { app } = gatewayApp({ key_prefix, routes });
    const denied = await app.request(url("/health"), from("198.51.100.113"));
    expect(denied.status).toBe(403);
    for (let i = 0; i < 5; i++) {
      const res = await app.request(url("/api/x"), from("198.51.100.114"));
      expect(res.status).toBe(200);
      expect(((await res.json()) as Answer).decision.limits).toEqual([]);
    }
    // the allow entry names route x only: y still limits that client
    expect((await app.request(url("/api/y/1"), from("198.51.100.114"))).status).toBe(200);
    expect((await app.request(url("/api/y/1"), from("198.51.100.114"))).status).toBe(429);
  });

  it("refunds the token of a request answered with a replay", async () => {
    const { app, calls } = gatewayApp({
      key_prefix: prefix(),
      routes: [
        {
          name: "orders",
          match: "/orders",
          idempotency: {},
          limits: [{ name: "per-ip", rate: 1, period: "1h", burst: 2, lease: false }],
        },
      ],
    });
    const order = (key: string): RequestInit =>
      from("198.51.100.115", { method: "POST", body: '{"sku":"a"}', headers: { "Idempotency-Key": key } });
    const bg = background();
    const first = await app.request(url("/orders"), order("k-1"), {}, bg.ctx);
    expect(first.status).toBe(200);
    expect(((await first.json()) as Answer).decision.limits[0]?.remaining).toBe(1);
    await bg.settled();
    const replayed = background();
    const replay = await app.request(url("/orders"), order("k-1"), {}, replayed.ctx);
    expect(replay.headers.get("Sluice-Decision")).toBe("replay");
    await replay.text();
    await replayed.settled();
    // without the refund, the replay would have spent the last token
    const second = await app.request(url("/orders"), order("k-2"));
    expect(second.status).toBe(200);
    expect(((await second.json()) as Answer).decision.limits[0]?.remaining).toBe(0);
    expect(calls.n).toBe(2);
  });

  it("throws the ConfigError of [vars.SLUICE], naming the field", () => {
    expect(() => sluice({ routes: [{ name: "a", match: "api" }] })).toThrow(ConfigError);
    expect(() => sluice({ routes: [{ name: "a", match: "api" }] })).toThrow(/^SLUICE\.routes\[0\] \("a"\)\.match: /);
    expect(() =>
      sluice({ routes: [{ name: "a", match: "/a", limits: [{ name: "l", rate: 0, period: "1s" }] }] }),
    ).toThrow(/^SLUICE\.routes\[0\] \("a"\)\.limits\[0\] \("l"\)\.rate: /);
    expect(() =>
      sluice({
        routes: [
          { name: "a", match: "/a" },
          { name: "a", match: "/b" },
        ],
      }),
    ).toThrow(/^SLUICE\.routes\[1\] \("a"\)\.name: duplicate route name "a"/);
    expect(() => sluice({}, { origin: "ftp://example.com" })).toThrow(/^ORIGIN_URL: /);
  });
});

describe("middleware composed in an app", () => {
  it("is stamped by the middleware nearest the handler: a replay says replay", async () => {
    const shared = options();
    const app = new Hono<SluiceEnv>();
    const calls = { n: 0 };
    app.use(
      "*",
      rateLimit({ ...shared, limits: [{ name: "per-ip", rate: 1, period: "1h", burst: 10, lease: false }] }),
    );
    app.post("/orders", idempotency({ ...shared, name: "orders" }), (c) => {
      calls.n++;
      return c.json({ created: true }, 201);
    });
    const order: RequestInit = from("198.51.100.116", {
      method: "POST",
      body: "{}",
      headers: { "Idempotency-Key": "o-1" },
    });
    const bg = background();
    const first = await app.request(url("/orders"), order, {}, bg.ctx);
    expect(first.status).toBe(201);
    expect(first.headers.get("Sluice-Decision")).toBe("allow");
    expect(first.headers.get("RateLimit")).toMatch(/^"per-ip";r=9;/);
    await first.text();
    await bg.settled();
    const replay = await app.request(url("/orders"), order);
    expect(replay.status).toBe(201);
    expect(replay.headers.get("Sluice-Decision")).toBe("replay");
    expect(replay.headers.get("Idempotent-Replayed")).toBe("true");
    expect(calls.n).toBe(1);
  });

  it("charges nothing for a replay answered by idempotency() inside rateLimit()", async () => {
    // docs/idempotency-and-sessions.md, Idempotency: "a replay refunds the tokens its decision took, so replays cost a client nothing"
    const shared = options();
    const app = new Hono<SluiceEnv>();
    app.use(
      "*",
      rateLimit({ ...shared, limits: [{ name: "per-ip", rate: 1, period: "1h", burst: 10, lease: false }] }),
    );
    app.post("/orders", idempotency({ ...shared, name: "orders" }), (c) => c.json({ created: true }, 201));
    const order = (key: string): RequestInit =>
      from("198.51.100.117", { method: "POST", body: "{}", headers: { "Idempotency-Key": key } });
    const send = async (key: string) => {
      const bg = background();
      const res = await app.request(url("/orders"), order(key), {}, bg.ctx);
      await res.text();
      await bg.settled();
      return res;
    };
    expect((await send("r-1")).headers.get("RateLimit")).toMatch(/^"per-ip";r=9;/);
    for (let i = 0; i < 3; i++) expect((await send("r-1")).headers.get("Sluice-Decision")).toBe("replay");
    // three replays later, the next new order finds the bucket as the first one left it
    expect((await send("r-2")).headers.get("RateLimit")).toMatch(/^"per-ip";r=8;/);
  });

  it("shows the handler the limits of a rateLimit() further out than the idempotency() nearest it, typed on a plain new Hono()", async () => {
    // the view's limits are the nearest the request has: an idempotency() mount decides none of its own
    const shared = options();
    const app = new Hono();
    app.use(
      "*",
      rateLimit({ ...shared, limits: [{ name: "per-ip", rate: 1, period: "1h", burst: 10, lease: false }] }),
    );
    app.post("/orders", idempotency({ ...shared, name: "orders" }), (c) => {
      const view: SluiceDecision = c.get("sluice");
      return c.json({
        limits: view.limits.map((l) => [l.name, l.remaining]),
        fenced: view.fencingToken !== undefined,
        key: view.idempotencyKey,
        published: c.get("sluiceLimits")?.outcomes.map((o) => o.limit.name),
        guarded: c.get("sluiceGuards")?.sluiceHeaders["idempotency-key"],
      });
    });
    const bg = background();
    const init = from("198.51.100.119", { method: "POST", body: "{}", headers: { "Idempotency-Key": "v-1" } });
    const res = await app.request(url("/orders"), init, {}, bg.ctx);
    expect(await res.json()).toEqual({
      limits: [["per-ip", 9]],
      fenced: true,
      key: "v-1",
      published: ["per-ip"],
      guarded: "v-1",
    });
    await bg.settled();
  });

  it("shows the handler the fencing token of an idempotency() further out than the rateLimit() nearest it", async () => {
    // the mirror of the test above: the view's token and key are the claim the request holds, whichever mount took it
    const shared = options();
    const app = new Hono();
    app.use("/orders", idempotency({ ...shared, name: "orders" }));
    app.post(
      "/orders",
      rateLimit({ ...shared, limits: [{ name: "per-ip", rate: 1, period: "1h", burst: 10, lease: false }] }),
      (c) => {
        const view = c.get("sluice");
        return c.json({ token: view.fencingToken, key: view.idempotencyKey, limits: view.limits.length });
      },
    );
    const bg = background();
    const init = from("198.51.100.120", { method: "POST", body: "{}", headers: { "Idempotency-Key": "v-2" } });
    const res = await app.request(url("/orders"), init, {}, bg.ctx);
    const body = (await res.json()) as { token?: string; key?: string; limits: number };
    expect(body.token).toMatch(/^\d+$/);
    expect(body).toMatchObject({ key: "v-2", limits: 1 });
    await bg.settled();
  });

  it("a handler's own Sluice-* headers (an upstream's, proxied) neither refund its request nor pass for sluice's stamp", async () => {
    // issue 29, finding 12: the refund follows what sluice's idempotency step did, never a response header
    const shared = options();
    const app = new Hono<SluiceEnv>();
    let calls = 0;
    app.use("*", rateLimit({ ...shared, limits: [{ name: "per-ip", rate: 2, period: "1h", lease: false }] }));
    app.get("/img/*", () => {
      calls++;
      return new Response("png", {
        headers: { "Sluice-Decision": "replay", "Sluice-Region": "upstream", "Sluice-Delay-Ms": "9" },
      });
    });
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) {
      const bg = background();
      const res = await app.request(url(`/img/${i}.png`), from("198.51.100.118"), {}, bg.ctx);
      await res.text();
      await bg.settled();
      statuses.push(res.status);
      if (res.status === 200) {
        expect(res.headers.get("Sluice-Decision")).toBe("allow");
        expect(res.headers.get("Sluice-Region")).not.toBe("upstream");
        expect(res.headers.get("Sluice-Delay-Ms")).toBeNull();
      }
    }
    expect(statuses).toEqual([200, 200, 429, 429, 429]);
    expect(calls).toBe(2);
  });

  it("names a bad option as the options spell it", () => {
    // idempotency(), session() and breaker() take their table's fields at the top level
    expect(() => idempotency({ lease: "1d", ttl: "1h" })).toThrow(/^idempotency\(\): lease: must be shorter than ttl/);
    // @ts-expect-error -- not a key part: the types refuse it, and so does the schema for JavaScript callers
    expect(() => session({ key: "nope" })).toThrow(/^session\(\): key: "nope" is not a key/);
    expect(() => breaker({ min_requests: 0 })).toThrow(/^breaker\(\): min_requests: /);
    // as rateLimit() does for its limits, and every middleware for the shared settings
    expect(() => rateLimit({ limits: [{ name: "l", rate: 0, period: "1s" }] })).toThrow(
      /^rateLimit\(\): limits\[0\] \("l"\)\.rate: /,
    );
    expect(() => idempotency({ timeout_ms: 0 })).toThrow(/^idempotency\(\): timeout_ms: /);
  });

  it("refuses an impossible option at construction, naming the field", () => {
    expect(() => rateLimit({ limits: [] })).toThrow(
      /^rateLimit\(\): limits: must hold at least one limit \(or set adaptive\)$/,
    );
    const limits = [{ name: "l", rate: 1, period: "1s" as const }];
    expect(() => rateLimit({ limits, redis: { url: "not a url", token: "t" } })).toThrow(
      /^rateLimit\(\): redis\.url: "not a url" is not an https:\/\/ \(or http:\/\/\) URL$/,
    );
    expect(() => idempotency({ redis: { url: "redis://localhost:6380", token: "t" } })).toThrow(
      /^idempotency\(\): redis\.url: /,
    );
    expect(() => rateLimit({ limits, redis: { url: "https://eu1.upstash.io", token: "" } })).toThrow(
      /^rateLimit\(\): redis\.token: /,
    );
    expect(() => rateLimit({ limits, redis: { url: "https://eu1.upstash.io", token: "t" } })).not.toThrow();
    expect(() => rateLimit({ limits: [] })).toThrow(ConfigError);
  });
});

describe("a middleware with no Redis configured", () => {
  it("answers a guarded request 500 naming UPSTASH_REDIS_REST_URL, logs it once, and leaves other paths alone", async () => {
    const logs = vi.spyOn(console, "log").mockImplementation(() => undefined);
    try {
      const runtime = new Runtime();
      const app = new Hono<SluiceEnv>();
      app.use("/guarded/*", rateLimit({ limits: [{ name: "per-ip", rate: 5, period: "1m" }], runtime }));
      app.use("/once/*", idempotency({ runtime }));
      app.all("*", (c) => c.text("handled"));
      const env = {}; // a Worker without the Upstash variables
      for (const path of ["/guarded/a", "/guarded/b", "/once/c"]) {
        const r = await app.request(
          url(path),
          from("10.9.0.1", { method: "POST", headers: { "Idempotency-Key": "k1" } }),
          env,
        );
        expect(r.status, path).toBe(500);
        const body = (await r.json()) as Record<string, unknown>;
        expect(body).toMatchObject({ title: "Redis not configured", missing: "UPSTASH_REDIS_REST_URL" });
        expect(body.detail).toContain("UPSTASH_REDIS_REST_URL");
      }
      expect((await app.request(url("/open"), from("10.9.0.1"), env)).status).toBe(200);
      const lines = logs.mock.calls.map((args) => String(args[0])).filter((l) => l.includes("redis_not_configured"));
      expect(lines).toHaveLength(1);
      expect(JSON.parse(lines[0] ?? "{}")).toMatchObject({
        event: "redis_not_configured",
        missing: "UPSTASH_REDIS_REST_URL",
      });
    } finally {
      logs.mockRestore();
    }
  });

  it("names the region's own token when the region has its URL but not its token", async () => {
    const app = new Hono<SluiceEnv>();
    const regions = { eu: { continents: ["EU"] }, us: { continents: ["NA"] } };
    app.use("*", rateLimit({ limits: [{ name: "per-ip", rate: 5, period: "1m" }], home_region: "us", regions }));
    app.all("*", (c) => c.text("handled"));
    const env = {
      UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9",
      UPSTASH_REDIS_REST_TOKEN: "t",
      UPSTASH_REDIS_REST_URL_EU: "http://127.0.0.1:9",
    };
    const req = new Request(url("/x"), from("10.9.0.2"));
    Object.defineProperty(req, "cf", { value: { continent: "EU" } });
    const r = await app.request(req, undefined, env);
    expect(r.status).toBe(500);
    expect(await r.json()).toMatchObject({ missing: "UPSTASH_REDIS_REST_TOKEN_EU" });
  });
});
