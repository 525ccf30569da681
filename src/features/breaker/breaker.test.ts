import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { from, middlewareRig } from "../../../test/support/middleware-rig.js";
import { breaker, ConfigError, type BreakerOptions, type SluiceEnv } from "../../index.js";

/** breaker() in an app of its own, in Node, against a real Redis behind the Upstash-REST bridge. */
const rig = middlewareRig("brk");

/** Opens after 4 outcomes, at most one per client (client_share 0.25): four failing clients open it. */
function options(extra: Partial<BreakerOptions> = {}): BreakerOptions {
  return rig.options({ window: "1m", min_requests: 4, cooldown: "1m", ...extra });
}

/** GET /origin fails with 500 while `state.failing`; `calls` counts the times the handler ran. */
function failingApp(opts: BreakerOptions) {
  const app = new Hono<SluiceEnv>();
  const state = { failing: true, calls: 0 };
  app.use("/origin", breaker(opts));
  app.get("/origin", (c) => {
    state.calls++;
    return state.failing ? c.text("origin down", 500) : c.text("fine");
  });
  return { app, state };
}

const CLIENTS = ["198.51.100.41", "198.51.100.42", "198.51.100.43", "198.51.100.44"];

describe("breaker()", () => {
  it("opens once the handler failed for four clients: 503 without calling it", async () => {
    const { app, state } = failingApp(options());
    for (const ip of CLIENTS) expect((await app.request("/origin", from(ip))).status).toBe(500);
    expect(state.calls).toBe(4);

    const shed = await app.request("/origin", from("198.51.100.45"));
    expect(shed.status).toBe(503);
    expect(shed.headers.get("content-type")).toBe("application/problem+json");
    expect(shed.headers.get("Sluice-Decision")).toBe("reject");
    // the cool-down is a minute
    const retryAfter = Number(shed.headers.get("Retry-After"));
    expect(retryAfter).toBeGreaterThan(30);
    expect(retryAfter).toBeLessThanOrEqual(60);
    const body = (await shed.json()) as { title: string; detail: string; retry_after_ms: number };
    expect(body.title).toBe("Origin unavailable");
    expect(body.detail).toContain('route "app"');
    expect(body.retry_after_ms).toBeGreaterThan(30_000);
    // a working origin does not matter while it is open: nobody reaches it
    state.failing = false;
    for (const ip of CLIENTS) expect((await app.request("/origin", from(ip))).status).toBe(503);
    expect(state.calls).toBe(4);
  });

  it("counts a handler that throws as a failure", async () => {
    const app = new Hono<SluiceEnv>();
    let calls = 0;
    app.use("/origin", breaker(options()));
    app.get("/origin", () => {
      calls++;
      throw new Error("crashed");
    });
    app.onError((_e, c) => c.text("crashed", 500));
    for (const ip of CLIENTS) expect((await app.request("/origin", from(ip))).status).toBe(500);
    expect((await app.request("/origin", from("198.51.100.45"))).status).toBe(503);
    expect(calls).toBe(4);
  });

  it("is never opened by one client alone, however many failures it causes", async () => {
    const { app, state } = failingApp(options());
    for (let i = 0; i < 12; i++) expect((await app.request("/origin", from("198.51.100.46"))).status).toBe(500);
    expect(state.calls).toBe(12);
    // everybody else still reaches the handler
    state.failing = false;
    expect((await app.request("/origin", from("198.51.100.47"))).status).toBe(200);
  });

  it("serves the static fallback page while open, with Sluice-Decision fallback", async () => {
    const { app, state } = failingApp(
      options({ fallback: { status: 503, content_type: "text/html; charset=utf-8", body: "<h1>Back soon</h1>" } }),
    );
    for (const ip of CLIENTS) expect((await app.request("/origin", from(ip))).status).toBe(500);
    const page = await app.request("/origin", from("198.51.100.48"));
    expect(page.status).toBe(503);
    expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(page.headers.get("cache-control")).toBe("no-store");
    expect(page.headers.get("Sluice-Decision")).toBe("fallback");
    expect(page.headers.get("Sluice-Region")).toBe("home");
    expect(await page.text()).toBe("<h1>Back soon</h1>");
    expect(state.calls).toBe(4);
  });

  it("stays closed while the handler mostly succeeds", async () => {
    const { app, state } = failingApp(options({ error_ratio: 0.75 }));
    // two failures and two successes from four clients: a ratio of 0.5 < 0.75
    for (const [i, ip] of CLIENTS.entries()) {
      state.failing = i % 2 === 0;
      await app.request("/origin", from(ip));
    }
    state.failing = false;
    const res = await app.request("/origin", from("198.51.100.49"));
    expect(res.status).toBe(200);
    expect(res.headers.get("Sluice-Decision")).toBe("allow");
    expect(state.calls).toBe(5);
  });

  it("throws a ConfigError naming a bad option", () => {
    expect(() => breaker({ min_requests: 0 })).toThrow(ConfigError);
    expect(() => breaker({ error_ratio: 2 })).toThrow(/^breaker\(\): .*error_ratio: /);
    expect(() => breaker({ fallback: { status: 700, body: "x" } })).toThrow(/^breaker\(\): fallback\.status: /);
  });
});
