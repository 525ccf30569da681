/**
 * The admin app on its own (no Worker, no Redis): the guard, the problems it answers, body
 * validation and the dashboard's login. What needs Redis is covered by test/security/admin.test.ts
 * and test/integration/operating.test.ts against the built Worker.
 */
import { describe, expect, it } from "vitest";
import { issueSession } from "./auth.js";
import { adminApp } from "./index.js";
import { AUTH_FAILURE_LIMIT, AUTH_WINDOW_MS, AuthThrottle, beginAuthAttempt } from "./throttle.js";
import type { Env } from "../env.js";
import { Runtime } from "../runtime.js";

const TOKEN = "unit-admin-token-0123456789";
const SLUICE = {
  key_prefix: "u",
  routes: [{ name: "api", match: "/api/*", limits: [{ name: "per-ip", rate: 2, period: "1h" }] }],
};
const ENV: Env = { ORIGIN_URL: "https://user:pw-0123@origin.example/", SLUICE, SLUICE_ADMIN_TOKEN: TOKEN };

interface Call {
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  env?: Env;
}

/** One admin request, as app.ts hands it over (path already normalised), from its own runtime unless given one. */
async function call(path: string, init: Call = {}, runtime = new Runtime()) {
  const app = adminApp(runtime);
  const res = await app.request(
    `http://sluice.test/__sluice${path}`,
    { method: init.method ?? "GET", headers: init.headers, body: init.body },
    init.env ?? ENV,
  );
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) as Record<string, unknown> };
}

const bearer = (token = TOKEN) => ({ authorization: `Bearer ${token}` });
const json = (body: unknown, token = TOKEN) => ({
  headers: { ...bearer(token), "content-type": "application/json" },
  body: JSON.stringify(body),
});

describe("the admin guard", () => {
  it("answers health to anybody, and says more only to the operator", async () => {
    expect((await call("/health")).json()).toEqual({ status: "up" });
    expect((await call("/health", { headers: bearer("wrong") })).json()).toEqual({ status: "up" });
    expect((await call("/health", { env: { ...ENV, SLUICE_ADMIN_TOKEN: undefined } })).json()).toEqual({
      status: "up",
    });
    const full = await call("/health", { headers: bearer() });
    expect(full.status).toBe(503); // no Redis configured for the home region
    expect(full.json()).toEqual({
      ok: false,
      regions: [{ region: "home", reachable: false, error: "no Redis configured" }],
    });
  });

  it("refuses a missing or wrong token with a 401 problem, and is off without a configured token", async () => {
    for (const headers of [{}, bearer("y".repeat(TOKEN.length)), { authorization: TOKEN }]) {
      const r = await call("/config", { headers });
      expect([r.status, r.headers.get("content-type"), r.headers.get("www-authenticate")]).toEqual([
        401,
        "application/problem+json",
        'Bearer realm="sluice"',
      ]);
    }
    const off = await call("/config", { headers: bearer(), env: { ...ENV, SLUICE_ADMIN_TOKEN: undefined } });
    expect([off.status, off.json().title]).toEqual([404, "Not found"]);
  });

  it("shows the configuration without the origin's credentials or the token", async () => {
    const r = await call("/config", { headers: bearer() });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({
      key_prefix: "u",
      originUrl: "https://origin.example/",
      routes: [{ name: "api" }],
    });
    expect(r.text).not.toContain("pw-0123");
    expect(r.text).not.toContain(TOKEN);
  });

  it("answers an invalid configuration with the gateway's 500 problem and decision headers", async () => {
    const r = await call("/config", { headers: bearer(), env: { ...ENV, SLUICE: { routes: [{ name: "x" }] } } });
    expect(r.status).toBe(500);
    expect(r.headers.get("content-type")).toBe("application/problem+json");
    expect([r.headers.get("sluice-decision"), r.headers.get("sluice-region")]).toEqual(["reject", "unknown"]);
    expect(r.json()).toMatchObject({
      title: "Invalid sluice configuration",
      detail: expect.stringContaining("SLUICE.routes"),
    });
  });

  it("answers unknown paths and methods with a 404 problem, after the guard", async () => {
    expect((await call("/nope")).status).toBe(401);
    for (const [path, method] of [
      ["/nope", "GET"],
      ["/config", "POST"],
      ["/buckets/api", "GET"],
    ] as const) {
      const r = await call(path, { method, headers: bearer() });
      expect([r.status, r.json().detail]).toEqual([404, "no such admin route"]);
    }
  });

  it("takes changes made with the session cookie only as JSON", async () => {
    const r = await call("/lists", {
      method: "PUT",
      headers: { cookie: "sluice_admin=1", "content-type": "application/x-www-form-urlencoded" },
      body: "kind=deny",
    });
    expect([r.status, r.json().title]).toEqual([415, "JSON required"]);
  });
});

describe("admin bodies", () => {
  const put = (body: unknown) => call("/overrides", { method: "PUT", ...json(body) });

  it("refuses a body that fails its schema with a 400 problem naming the field", async () => {
    const cases: Array<[string, string, unknown]> = [
      ["/overrides", "PUT", { route: "api", limit: "per-ip", rate: -1, ttl: "1m" }],
      ["/overrides", "PUT", { route: "api", limit: "per-ip", rate: 1, ttl: "soon" }],
      ["/overrides", "PUT", { route: "api", limit: "per-ip", rate: 1, ttl: "1m", extra: 1 }],
      ["/lists", "PUT", { kind: "deny", entry: "not an ip", ttl: "1m" }],
      ["/lists", "DELETE", { kind: "maybe", entry: "1.2.3.4" }],
      ["/idempotency/resolve", "POST", { route: "api", key: "nope", action: "release" }],
    ];
    const fields = ["rate", "ttl", "body", "entry", "kind", "key"];
    for (const [i, [path, method, body]] of cases.entries()) {
      const r = await call(path, { method, ...json(body) });
      expect([r.status, r.headers.get("content-type")], path).toEqual([400, "application/problem+json"]);
      expect(r.json(), JSON.stringify(body)).toMatchObject({
        title: "Invalid request",
        detail: expect.stringMatching(new RegExp(`^${fields[i]}: `)),
      });
    }
  });

  it("refuses malformed JSON and a missing body with a 400 problem", async () => {
    const malformed = await call("/overrides", {
      method: "PUT",
      headers: { ...bearer(), "content-type": "application/json" },
      body: "{",
    });
    expect([malformed.status, malformed.headers.get("content-type"), malformed.json().title]).toEqual([
      400,
      "application/problem+json",
      "Invalid request",
    ]);
    const none = await call("/overrides", { method: "DELETE", headers: bearer() });
    expect([none.status, none.json().detail]).toEqual([
      400,
      "body: Invalid input: expected object, received undefined",
    ]);
  });

  it("reads a bearer request's body as JSON whatever its Content-Type (curl -d)", async () => {
    const r = await call("/overrides", {
      method: "PUT",
      headers: { ...bearer(), "content-type": "application/x-www-form-urlencoded" },
      body: JSON.stringify({ route: "api", limit: "per-ip", rate: 5, ttl: "1m" }),
    });
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ ok: true, key: "u:api:overrides", field: "per-ip:*" });
  });

  it("checks overrides like configured limits, and names limits as configured", async () => {
    const inexact = await put({ route: "api", limit: "per-ip", rate: 7, period: "100000d", ttl: "1m" });
    expect([inexact.status, inexact.json().detail]).toEqual([400, expect.stringMatching(/^rate: .*exactly/)]);
    expect((await put({ route: "API", limit: "per-ip", rate: 1, ttl: "1m" })).status).toBe(404);
    const removed = await call("/overrides", {
      method: "DELETE",
      ...json({ route: "api", limit: "per-ip", identity: { ip: "192.0.2.7" } }),
    });
    expect(removed.json()).toMatchObject({ ok: true, removed: expect.stringMatching(/^per-ip:[0-9a-f]{32}$/) });
  });

  it("answers a route that needs Redis without one with a 503 problem", async () => {
    const r = await call("/ledger", { headers: bearer() });
    expect([r.status, r.json().title]).toEqual([503, "Ledger unavailable"]);
  });
});

describe("the dashboard's login", () => {
  const login = (token: string, runtime: Runtime, ip = "192.0.2.1") =>
    call(
      "/login",
      {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", "cf-connecting-ip": ip },
        body: new URLSearchParams({ token }).toString(),
      },
      runtime,
    );

  it("gives the form again for a wrong token; without Redis, no session for the right one (503)", async () => {
    const runtime = new Runtime();
    const wrong = await login("wrong", runtime);
    expect([wrong.status, wrong.headers.get("set-cookie")]).toEqual([401, null]);
    expect(wrong.text).toContain('name="token"');
    expect(wrong.text).toContain("not the admin token");
    // sessions live in the home region's Redis (test/security/dashboard-session.test.ts): none here
    const right = await login(TOKEN, runtime);
    expect([right.status, right.headers.get("set-cookie")]).toEqual([503, null]);
    expect(right.json()).toMatchObject({ title: "Dashboard sessions unavailable" });
    // a well-signed cookie that cannot be checked is refused, never admitted
    const session = { cookie: `sluice_admin=${(await issueSession(TOKEN)).value}` };
    expect((await call("", { headers: session }, runtime)).status).toBe(503);
    expect((await call("/fragments/panels", { headers: session }, runtime)).status).toBe(503);
    expect((await call("/fragments/panels", {}, runtime)).status).toBe(401);
    expect((await call("", {}, runtime)).text).toContain("sluice · sign in");
    expect((await call("/health", { headers: session }, runtime)).json()).toEqual({ status: "up" });
  });

  it("throttles wrong tokens per client, in the isolate when there is no Redis", async () => {
    const runtime = new Runtime();
    for (let i = 0; i < AUTH_FAILURE_LIMIT; i++) expect((await login(`guess-${i}`, runtime)).status).toBe(401);
    const right = await login(TOKEN, runtime);
    expect([right.status, right.headers.get("content-type"), right.headers.get("set-cookie")]).toEqual([
      429,
      "application/problem+json",
      null,
    ]);
    expect(Number(right.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect((await call("/config", { headers: { ...bearer(), "cf-connecting-ip": "192.0.2.1" } }, runtime)).status).toBe(
      429,
    );
    // another client's right token is compared (not throttled): it only finds no Redis to keep a session in
    expect((await login(TOKEN, runtime, "192.0.2.2")).status).toBe(503);
  });
});

describe("AuthThrottle, counting alone", () => {
  it("refuses a client after the limit until its window ends; successes are given back", async () => {
    const throttle = new AuthThrottle(100);
    const now = 1_000_000;
    for (let i = 0; i < 5; i++) await (await beginAuthAttempt(throttle, undefined, "p", "ip-a", now)).settle(true);
    for (let i = 0; i < AUTH_FAILURE_LIMIT; i++) {
      const attempt = await beginAuthAttempt(throttle, undefined, "p", "ip-a", now);
      expect(attempt.retryAfterMs).toBe(0);
      await attempt.settle(false);
    }
    expect((await beginAuthAttempt(throttle, undefined, "p", "ip-a", now + 1_000)).retryAfterMs).toBe(
      AUTH_WINDOW_MS - 1_000,
    );
    expect((await beginAuthAttempt(throttle, undefined, "p", "ip-b", now)).retryAfterMs).toBe(0);
    expect((await beginAuthAttempt(throttle, undefined, "p", "ip-a", now + AUTH_WINDOW_MS)).retryAfterMs).toBe(0);
  });

  it("is bounded: past its size expired windows go first, then the oldest", () => {
    const throttle = new AuthThrottle(2);
    const now = 1_000_000;
    throttle.remember("a", AUTH_FAILURE_LIMIT, now + 10, now);
    throttle.remember("b", AUTH_FAILURE_LIMIT, now + AUTH_WINDOW_MS, now);
    throttle.remember("c", AUTH_FAILURE_LIMIT, now + AUTH_WINDOW_MS, now + 20); // a has expired: it goes
    expect(["a", "b", "c"].map((id) => throttle.refusedForMs(id, now + 20))).toEqual([
      0,
      AUTH_WINDOW_MS - 20,
      AUTH_WINDOW_MS - 20,
    ]);
    throttle.remember("d", AUTH_FAILURE_LIMIT, now + AUTH_WINDOW_MS, now + 20); // none expired: the oldest (b) goes
    expect(["b", "c", "d"].map((id) => throttle.refusedForMs(id, now + 20) > 0)).toEqual([false, true, true]);
  });
});
