import { describe, expect, it } from "vitest";
import { countedApp, middlewareRig, TIMEOUT_MS } from "../../../test/support/middleware-rig.js";
import { sluice, type SluiceConfig } from "../../index.js";

/**
 * How a refused request is shed, through sluice(config) in an app, in Node (no Cache API here, so
 * a fallback route has no kept copy: what it serves is its static `fallback`).
 */
const { connection, prefix } = middlewareRig("shed");

function appWith(routes: NonNullable<SluiceConfig["routes"]>) {
  const config: SluiceConfig = { key_prefix: prefix(), timeout_ms: TIMEOUT_MS, routes };
  return countedApp(sluice(config, connection()), (c) => c.text(`origin page ${c.req.path}`));
}

const from = (ip: string, method = "GET"): RequestInit => ({ method, headers: { "CF-Connecting-IP": ip } });

describe('on_limit = "reject"', () => {
  it("answers a refusal with the 429 problem of docs/configuration.md", async () => {
    const { app, calls } = appWith([
      {
        name: "products",
        match: "/products/*",
        limits: [{ name: "per-ip", rate: 1, period: "1h", burst: 2, lease: false }],
      },
    ]);
    for (let i = 0; i < 2; i++) expect((await app.request("/products/1", from("198.51.100.100"))).status).toBe(200);
    const res = await app.request("/products/1", from("198.51.100.100"));
    expect(res.status).toBe(429);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("Sluice-Decision")).toBe("reject");
    expect(res.headers.get("Sluice-Region")).toBe("home");
    expect(res.headers.get("RateLimit-Policy")).toBe('"per-ip";q=1;w=3600;burst=2');
    expect(res.headers.get("RateLimit")).toMatch(/^"per-ip";r=0;t=\d+$/);
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(["detail", "limit", "retry_after_ms", "status", "title", "type"]);
    expect(body).toMatchObject({
      type: "/__sluice/problems/too-many-requests",
      title: "Too many requests",
      status: 429,
      limit: "per-ip",
    });
    const retryMs = body.retry_after_ms as number;
    expect(body.detail).toBe(
      `limit "per-ip" of route "products" allows 1 per 3600000 ms (burst 2); retry in ${retryMs} ms`,
    );
    expect(Number(res.headers.get("Retry-After"))).toBe(Math.max(1, Math.ceil(retryMs / 1000)));
    expect(calls.n).toBe(2);
  });

  it("reports the limit with the longest wait when several refuse", async () => {
    const { app } = appWith([
      {
        name: "api",
        match: "/api/*",
        limits: [
          { name: "per-minute", rate: 1, period: "1m", burst: 1, lease: false },
          { name: "per-day", rate: 1, period: "1d", burst: 1, lease: false },
        ],
      },
    ]);
    expect((await app.request("/api/a", from("198.51.100.101"))).status).toBe(200);
    const res = await app.request("/api/a", from("198.51.100.101"));
    expect(res.status).toBe(429);
    expect(((await res.json()) as { limit: string }).limit).toBe("per-day");
    expect(Number(res.headers.get("Retry-After"))).toBeGreaterThan(80_000);
  });
});

describe('on_limit = "fallback"', () => {
  const sale = (fallback?: { status?: number; content_type?: string; body: string }) =>
    appWith([
      {
        name: "sale",
        match: "/sale/*",
        methods: ["GET"],
        on_limit: "fallback",
        ...(fallback ? { fallback } : {}),
        limits: [{ name: "site", key: "global", rate: 1, period: "1h", burst: 1, lease: false }],
      },
    ]);

  it("serves the route's static fallback page to a refused request, without calling the handler", async () => {
    const { app, calls } = sale({ status: 200, content_type: "text/html; charset=utf-8", body: "<h1>Sold out</h1>" });
    const first = await app.request("/sale/shoes", from("198.51.100.102"));
    expect(first.status).toBe(200);
    expect(await first.text()).toBe("origin page /sale/shoes");
    // the limit is global: another client is refused too, and gets the page
    const shed = await app.request("/sale/shoes", from("198.51.100.103"));
    expect(shed.status).toBe(200);
    expect(shed.headers.get("Sluice-Decision")).toBe("fallback");
    expect(shed.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(shed.headers.get("cache-control")).toBe("no-store");
    expect(shed.headers.get("RateLimit")).toMatch(/^"site";r=0;t=\d+$/);
    expect(await shed.text()).toBe("<h1>Sold out</h1>");
    expect(calls.n).toBe(1);
  });

  it("answers a shed HEAD with the fallback's status and no body", async () => {
    const { app, calls } = sale({ status: 503, body: "come back later" });
    expect((await app.request("/sale/a", from("198.51.100.104"))).status).toBe(200);
    const head = await app.request("/sale/a", from("198.51.100.104", "HEAD"));
    expect(head.status).toBe(503);
    expect(head.headers.get("Sluice-Decision")).toBe("fallback");
    expect(await head.text()).toBe("");
    expect(calls.n).toBe(1);
  });

  it("without a copy or a static page, falls back to the 429", async () => {
    const { app, calls } = sale();
    expect((await app.request("/sale/a", from("198.51.100.105"))).status).toBe(200);
    const res = await app.request("/sale/a", from("198.51.100.105"));
    expect(res.status).toBe(429);
    expect(res.headers.get("Sluice-Decision")).toBe("reject");
    expect(((await res.json()) as { limit: string }).limit).toBe("site");
    expect(calls.n).toBe(1);
  });
});
