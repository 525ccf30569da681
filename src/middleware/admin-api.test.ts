import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { from, middlewareRig, TIMEOUT_MS } from "../../test/support/middleware-rig.js";
import { accessLists, adminApi, ConfigError, rateLimit, type SluiceEnv } from "../index.js";

/** adminApi() mounted in a user's app beside the middleware, in Node against a real Redis. */
const { options } = middlewareRig("adm");

const TOKEN = "admin-token-for-tests";
const env = { SLUICE_ADMIN_TOKEN: TOKEN };
const bearer = { Authorization: `Bearer ${TOKEN}` };
const url = (path: string) => `http://shop.test${path}`;

/** The issue's app: rateLimit() and accessLists() on /api/*, the admin API mounted beside them, sharing one set of options. */
function shopApp() {
  const shared = options();
  const limits = [{ name: "per-ip", key: "ip" as const, rate: 100, period: "1m" as const, lease: false }];
  const app = new Hono<SluiceEnv>();
  app.use("/api/*", accessLists(shared), rateLimit({ ...shared, limits }));
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
