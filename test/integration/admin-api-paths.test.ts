/**
 * adminApi() in an app of a user's own against the gateway, in Node on one real Redis: every
 * spelling of an admin path reaches the admin API in both (or neither), and answers the same; the
 * sign-in form's redirect lands on the dashboard (issue 30, point 1).
 */
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/gateway/app.js";
import { accessLists, adminApi, rateLimit, Runtime, type SluiceEnv } from "../../src/index.js";
import { middlewareRig } from "../support/middleware-rig.js";
import { TOKEN as REDIS_TOKEN } from "./stack.js";

const { db, options } = middlewareRig("adp");

const TOKEN = "admin-token-for-tests";
const env = { SLUICE_ADMIN_TOKEN: TOKEN };
const bearer = { Authorization: `Bearer ${TOKEN}` };
const url = (path: string) => `http://shop.test${path}`;

/** An app of the user's: rateLimit() and accessLists() on /api/*, the admin API beside them. */
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

/** What a path's answer says of who answered it: the admin API (its status and media type), or the app. */
async function answeredBy(res: Response): Promise<string> {
  const type = (res.headers.get("content-type") ?? "").split(";")[0];
  const body = await res.text();
  if (body === "the app's own") return "the app";
  return `${res.status} ${type}${body.includes('name="token"') ? " (sign-in form)" : ""}`;
}

/**
 * Spellings of admin paths a client may send, and what the admin API makes of each (the gateway
 * normalises first: duplicate slashes, dot segments, `;parameters`, the prefix's case, a trailing
 * slash; the rest of the path keeps its case).
 */
const SPELLINGS: Array<[string, string]> = [
  ["/__sluice", "200 text/html (sign-in form)"],
  ["/__sluice/", "200 text/html (sign-in form)"],
  ["//__sluice/", "200 text/html (sign-in form)"],
  ["/__SLUICE/", "200 text/html (sign-in form)"],
  ["/__sluice/config", "200 application/json"],
  ["/__sluice/config/", "200 application/json"],
  ["//__sluice//config", "200 application/json"],
  ["/__Sluice/config", "200 application/json"],
  ["/__sluice/./config", "200 application/json"],
  ["/__sluice/x/../config", "200 application/json"],
  ["/api/%2e%2e/__sluice/config", "200 application/json"],
  ["/__sluice;v=1/config", "200 application/json"],
  ["/__sluice%2Fconfig", "200 application/json"],
  ["/__sluice/Config", "404 application/problem+json"],
  ["/__sluice/nothing/", "404 application/problem+json"],
  ["/__sluice-jobs/x", "the app"],
  ["/api/__sluice/config", "the app"],
];

describe("adminApi() takes every spelling of an admin path as the gateway does", () => {
  /** The gateway (src/gateway/app.ts) on the same Redis and key_prefix, with its own runtime. */
  function gateway(prefix: string) {
    const env = {
      ORIGIN_URL: "http://origin.invalid/",
      SLUICE: {
        key_prefix: prefix,
        routes: [{ name: "api", match: "/api/*", limits: [{ name: "per-ip", rate: 100, period: "1m" }] }],
      },
      SLUICE_ADMIN_TOKEN: TOKEN,
      UPSTASH_REDIS_REST_URL: db.stack.bridge.url,
      UPSTASH_REDIS_REST_TOKEN: REDIS_TOKEN,
    };
    const app = createApp(new Runtime());
    return (path: string, headers: Record<string, string>) => app.request(url(path), { headers }, env);
  }

  /** The issue's app, with a catch-all of its own after the admin API: what the admin API leaves reaches it. */
  function userApp() {
    const app = shopApp();
    app.all("*", (c) => c.text("the app's own", 404));
    return (path: string, headers: Record<string, string>, init: RequestInit = {}) =>
      app.request(url(path), { ...init, headers }, env);
  }

  it("/__sluice and /__sluice/ both serve the dashboard, and so does each spelling the gateway takes", async () => {
    const [mine, theirs] = [userApp(), gateway(options().key_prefix)];
    for (const [path, expected] of SPELLINGS) {
      expect(`${path}: ${await answeredBy(await mine(path, bearer))}`).toBe(`${path}: ${expected}`);
      const res = await theirs(path, bearer);
      // what is not the admin API's goes down the gateway's pipeline (here: the job status route, the origin)
      if (expected === "the app") expect(await res.text()).not.toContain("admin");
      else expect(`${path}: ${await answeredBy(res)}`).toBe(`${path}: ${expected}`);
    }
  });

  it("never lets a spelling past the guard: without the token each is the 401 of the gateway", async () => {
    const [mine, theirs] = [userApp(), gateway(options().key_prefix)];
    for (const [path, expected] of SPELLINGS) {
      if (expected === "the app" || expected.includes("sign-in form")) continue;
      for (const call of [mine, theirs]) {
        const res = await call(path, {});
        expect(`${path}: ${res.status}`).toBe(`${path}: 401`);
        expect(res.headers.get("WWW-Authenticate")).toBe('Bearer realm="sluice"');
      }
    }
  });

  it("signs in from the form to the dashboard: the redirect lands on the page, which draws the app's route", async () => {
    const call = userApp();
    const form = await call("/__sluice/login", {}, { method: "POST", body: new URLSearchParams({ token: TOKEN }) });
    expect(form.status).toBe(303);
    const location = form.headers.get("location") ?? "";
    expect(location).toBe("/__sluice/");
    const cookie = (form.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
    expect(cookie).toMatch(/^sluice_admin=/);
    const page = await call(location, { cookie });
    const html = await page.text();
    expect(page.status, html.slice(0, 300)).toBe(200);
    expect(html).toContain('data-route="api"');
    expect(html).not.toContain('name="token"');
  });
});
