import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { from, middlewareRig, TIMEOUT_MS } from "../../test/support/middleware-rig.js";
import { accessLists, adminApi, ConfigError, limiter, rateLimit, type SluiceEnv } from "../index.js";

/** adminApi() mounted in a user's app beside the middleware, in Node against a real Redis. */
const { options } = middlewareRig("adm");

const TOKEN = "admin-token-for-tests";
const env = { SLUICE_ADMIN_TOKEN: TOKEN };
const bearer = { Authorization: `Bearer ${TOKEN}` };
const url = (path: string) => `http://shop.test${path}`;

/** The issue's app: rateLimit() and accessLists() on /api/*, the admin API mounted beside them, sharing one set of options. */
function shopApp() {
  const shared = options();
  const api = { ...shared, name: "api" };
  const limits = [{ name: "per-ip", key: "ip" as const, rate: 100, period: "1m" as const, lease: false }];
  const app = new Hono<SluiceEnv>();
  app.use("/api/*", accessLists(api), rateLimit({ ...api, limits }));
  app.get("/api/orders", (c) => c.json({ orders: [] }));
  app.route("/", adminApi({ ...shared, config: { routes: [{ name: "api", match: "/api/*", limits }] } }));
  return app;
}

describe("adminApi()", () => {
  it("answers health without a token, and the rest only with it", async () => {
    const app = shopApp();
    const health = await app.request(url("/__sluice/health"), {}, env);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: "up" });
    const refused = await app.request(url("/__sluice/metrics"), {}, env);
    expect(refused.status).toBe(401);
    expect(refused.headers.get("content-type")).toContain("application/problem+json");
    expect(
      (await app.request(url("/__sluice/metrics"), { headers: { Authorization: "Bearer wrong" } }, env)).status,
    ).toBe(401);
    const metrics = await app.request(url("/__sluice/metrics"), { headers: bearer }, env);
    expect(metrics.status).toBe(200);
    const config = await app.request(url("/__sluice/config"), { headers: bearer }, env);
    expect(JSON.stringify(await config.json())).toContain('"api"');
  });

  it("is off (404) without SLUICE_ADMIN_TOKEN, and an unknown admin path is its own problem", async () => {
    const app = shopApp();
    expect((await app.request(url("/__sluice/metrics"), { headers: bearer }, {})).status).toBe(404);
    const unknown = await app.request(url("/__sluice/nothing-here"), { headers: bearer }, env);
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get("content-type")).toContain("application/problem+json");
  });

  it("a deny entry put through it is enforced by accessLists() in the same app", async () => {
    const app = shopApp();
    const client = "198.51.100.77";
    expect((await app.request(url("/api/orders"), from(client), env)).status).toBe(200);
    const put = await app.request(
      url("/__sluice/lists"),
      {
        method: "PUT",
        headers: { ...bearer, "Content-Type": "application/json" },
        body: JSON.stringify({ kind: "deny", entry: client, ttl: "1m" }),
      },
      env,
    );
    expect(put.status).toBe(200);
    // the lists are cached per isolate and read again once a decision has reported the change
    const statuses: number[] = [];
    for (let i = 0; i < 3 && statuses.at(-1) !== 403; i++)
      statuses.push((await app.request(url("/api/orders"), from(client), env)).status);
    expect(statuses.at(-1)).toBe(403);
    expect((await app.request(url("/api/orders"), from("198.51.100.78"), env)).status).toBe(200);
  });

  it("names a bad option's field at construction", () => {
    expect(() => adminApi({ timeout_ms: TIMEOUT_MS, config: { routes: [{ name: "x", match: "nope" }] } })).toThrow(
      ConfigError,
    );
    expect(() => adminApi({ config: { routes: [{ name: "x", match: "nope" }] } })).toThrow(
      /^adminApi\(\): config\.routes\[0\]/,
    );
    expect(() => adminApi({ key_prefix: "" })).toThrow(/^adminApi\(\): key_prefix/);
  });
});

/** An admin request with the token (and a JSON body). */
const admin = (app: Hono<SluiceEnv>, path: string, method = "GET", body?: unknown) =>
  app.request(
    url(`/__sluice${path}`),
    {
      method,
      headers: { ...bearer, "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    },
    env,
  );

/** The dashboard's figures, the isolate's counts flushed first (as the metrics endpoint does). */
async function dashboard(app: Hono<SluiceEnv>) {
  await admin(app, "/metrics");
  return (await (await admin(app, "/api/dashboard")).json()) as {
    notices: string[];
    routes: Array<{ route: string; allowed: number[]; shed: number[]; unserved?: string }>;
  };
}

const total = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const perIp = [{ name: "per-ip", key: "ip" as const, rate: 2, period: "1h" as const, lease: false }];

describe("adminApi(): one name joins the middleware and the admin view (issue 30, point 2)", () => {
  /** The docs' snippet as it was: rateLimit() and accessLists() without a name ("app"), adminApi() configured with "api". */
  function unnamedApp() {
    const shared = options();
    const app = new Hono<SluiceEnv>();
    app.use("/api/*", accessLists(shared), rateLimit({ ...shared, limits: perIp }));
    app.get("/api/items", (c) => c.json({ items: [] }));
    app.route("/", adminApi({ ...shared, config: { routes: [{ name: "api", match: "/api/*", limits: perIp }] } }));
    return app;
  }

  /** The docs' snippet now: one name given to the middleware, the admin API taking their routes from them. */
  function namedApp() {
    const shared = options();
    const api = { ...shared, name: "api" };
    const app = new Hono<SluiceEnv>();
    app.use("/api/*", accessLists(api), rateLimit({ ...api, limits: perIp }));
    app.get("/api/items", (c) => c.json({ items: [] }));
    app.route("/", adminApi(shared));
    return app;
  }

  it("an override for a route no middleware serves is a 400 naming `route` and the names they serve, not an ok that changes nothing", async () => {
    const app = unnamedApp();
    const put = await admin(app, "/overrides", "PUT", { route: "api", limit: "per-ip", rate: 50, ttl: "1m" });
    expect(put.status).toBe(400);
    const detail = ((await put.json()) as { detail: string }).detail;
    expect(detail).toMatch(/^route: no middleware of this app serves route "api" \(they serve "app"\)/);
    // and so are the other writes that would change nothing: a bucket, a list entry for the route, a mode
    expect((await admin(app, "/buckets/api/per-ip?ip=203.0.113.1")).status).toBe(400);
    const listed = await admin(app, "/lists", "PUT", {
      kind: "deny",
      entry: "203.0.113.1",
      ttl: "1m",
      routes: ["api"],
    });
    expect(listed.status).toBe(400);
    expect(((await listed.json()) as { detail: string }).detail).toMatch(/^routes\[0\]: no middleware/);
    expect((await admin(app, "/routes/api/mode", "PUT", { mode: "reject", ttl: "1m" })).status).toBe(400);
  });

  it("the dashboard says which route no middleware serves and which served route it does not show, instead of an empty panel", async () => {
    const app = unnamedApp();
    for (let i = 0; i < 3; i++) await app.request(url("/api/items"), from("203.0.113.2"), env);
    const data = await dashboard(app);
    expect(data.routes.map((r) => r.route)).toEqual(["api"]);
    expect(data.routes[0]?.unserved).toMatch(/no middleware of this app serves route "api"/);
    expect(data.notices).toEqual([
      expect.stringMatching(/^no middleware of this app serves route "api" \(they serve "app"\)/),
      'route "app" is served by accessLists() and rateLimit() but is not in adminApi()\'s config: its figures are not shown',
    ]);
    const page = await app.request(url("/__sluice/fragments/panels"), { headers: bearer }, env);
    const html = await page.text();
    expect(html).toContain('id="notices"');
    expect(html).toContain('class="unserved notice"');
  });

  it("with the name given to both middleware, adminApi() with no routes of its own shows their route's figures, and an override changes it", async () => {
    const app = namedApp();
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await app.request(url("/api/items"), from("203.0.113.3"), env)).status);
    expect(statuses).toEqual([200, 200, 429]);
    const data = await dashboard(app);
    expect(data.notices).toEqual([]);
    expect(data.routes.map((r) => [r.route, total(r.allowed), total(r.shed), r.unserved])).toEqual([
      ["api", 2, 1, undefined],
    ]);
    const put = await admin(app, "/overrides", "PUT", { route: "api", limit: "per-ip", rate: 50, ttl: "1m" });
    expect(put.status, await put.clone().text()).toBe(200);
    // in force within a second or so (each isolate reads the overrides again once a decision reports the change)
    let third = 0;
    for (let i = 0; i < 40 && third !== 200; i++) {
      const ip = `203.0.113.${100 + i}`;
      for (let n = 0; n < 3; n++) third = (await app.request(url("/api/items"), from(ip), env)).status;
      if (third !== 200) await new Promise((r) => setTimeout(r, 250));
    }
    expect(third).toBe(200);
  });

  it("accessLists() under the same name counts its refusals under that route, on the dashboard and in the metrics", async () => {
    const app = namedApp();
    const client = "198.51.100.9";
    const put = await admin(app, "/lists", "PUT", { kind: "deny", entry: client, ttl: "1m", routes: ["api"] });
    expect(put.status, await put.clone().text()).toBe(200);
    expect((await app.request(url("/api/items"), from(client), env)).status).toBe(403);
    const data = await dashboard(app);
    expect(total(data.routes.find((r) => r.route === "api")?.shed ?? [])).toBe(1);
    const metrics = await (await admin(app, "/metrics")).text();
    expect(metrics).toContain('sluice_decisions_total{route="api",limit="deny-list",decision="reject"} 1');
    expect(metrics).not.toContain('route="app"');
  });

  it("a route mode nothing in the app applies is refused (rateLimit() applies none), and its form says so", async () => {
    const app = namedApp();
    const put = await admin(app, "/routes/api/mode", "PUT", { mode: "reject", ttl: "1m" });
    expect(put.status).toBe(400);
    expect(((await put.json()) as { detail: string }).detail).toBe(
      'route: no middleware of route "api" applies route modes (sluice() does; rateLimit() does not)',
    );
    // back to normal always works: nothing is left forced
    expect((await admin(app, "/routes/api/mode", "PUT", { mode: "normal" })).status).toBe(200);
  });

  it("a deny entry for every route needs a middleware that applies the lists", async () => {
    const shared = options();
    const app = new Hono<SluiceEnv>();
    app.use("/api/*", rateLimit({ ...shared, name: "api", limits: perIp }));
    app.route("/", adminApi(shared));
    const put = await admin(app, "/lists", "PUT", { kind: "deny", entry: "198.51.100.10", ttl: "1m" });
    expect(put.status).toBe(400);
    expect(((await put.json()) as { detail: string }).detail).toContain("applies the deny and allow lists");
  });

  it("a key_prefix that differs from the middleware's is named, and limiter() routes are served routes too", async () => {
    const shared = options();
    const app = new Hono<SluiceEnv>();
    const reports = limiter({ ...shared, name: "reports", limits: [{ name: "per-user", rate: 5, period: "1h" }] });
    app.post("/reports", async (c) => c.json(await reports.limit(c, "u1")));
    app.route("/", adminApi(shared));
    expect((await app.request(url("/reports"), { method: "POST" }, env)).status).toBe(200);
    const data = await dashboard(app);
    expect(data.routes.map((r) => r.route)).toEqual(["reports"]);
    const ok = await admin(app, "/overrides", "PUT", { route: "reports", limit: "per-user", rate: 9, ttl: "1m" });
    expect(ok.status).toBe(200);

    const other = new Hono<SluiceEnv>();
    other.route(
      "/",
      adminApi({
        ...shared,
        key_prefix: `${shared.key_prefix}x`,
        config: {
          routes: [{ name: "reports", match: "/reports", limits: [{ name: "per-user", rate: 5, period: "1h" }] }],
        },
      }),
    );
    const refused = await admin(other, "/overrides", "PUT", {
      route: "reports",
      limit: "per-user",
      rate: 9,
      ttl: "1m",
    });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { detail: string }).detail).toContain(
      `they use key_prefix "${shared.key_prefix}"`,
    );
    // without a config, under a prefix no middleware uses: no routes, and the page says why
    const bare = new Hono<SluiceEnv>();
    bare.route("/", adminApi({ ...shared, key_prefix: `${shared.key_prefix}y` }));
    expect((await dashboard(bare)).notices).toEqual([
      `adminApi() has no routes: no sluice middleware of this app uses key_prefix "${shared.key_prefix}y" (they use key_prefix "${shared.key_prefix}"), and its config names none`,
    ]);
  });

  it("apart from its middleware (no sluice middleware in its isolate), adminApi() manages the routes its config names", async () => {
    const shared = options(); // a runtime of its own: no middleware made in it
    const app = new Hono<SluiceEnv>();
    app.route("/", adminApi({ ...shared, config: { routes: [{ name: "api", match: "/api/*", limits: perIp }] } }));
    const put = await admin(app, "/overrides", "PUT", { route: "api", limit: "per-ip", rate: 50, ttl: "1m" });
    expect(put.status).toBe(200);
    expect((await dashboard(app)).notices).toEqual([]);
  });
});
