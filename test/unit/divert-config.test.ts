/**
 * `on_limit = "divert"` in the configuration: its fields go together, a divert route takes no
 * idempotency or session table (a diverted request leaves before those steps), every error names
 * its field, and the admin API shows the divert URL without credentials.
 */
import { describe, expect, it } from "vitest";
import { adminApp } from "../../src/admin/index.js";
import { loadConfig } from "../../src/config/index.js";
import type { Env } from "../../src/env.js";
import { Runtime } from "../../src/runtime.js";

const ORIGIN_URL = "https://api.example.com";
const REPLICA = "https://replica.example.com/v1";

/** One route with one limit, and `over` on top. */
const routeWith = (over: Record<string, unknown>) => ({
  routes: [{ name: "r", match: "/api/*", limits: [{ name: "per-ip", rate: 1, period: "1s" }], ...over }],
});

function errorOf(over: Record<string, unknown>): { field: string; problem: string } {
  const r = loadConfig({ ORIGIN_URL, SLUICE: routeWith(over) });
  if (r.ok) throw new Error("expected an invalid configuration");
  return { field: r.error.field, problem: r.error.problem };
}

describe('on_limit = "divert" in the configuration', () => {
  it("parses divert_url once, and divert_timeout defaults to 10 s", () => {
    const r = loadConfig({ ORIGIN_URL, SLUICE: routeWith({ on_limit: "divert", divert_url: REPLICA }) });
    if (!r.ok) throw r.error;
    const route = r.config.routes[0]!;
    expect(route.divertUrl).toBeInstanceOf(URL);
    expect(route.divertUrl?.href).toBe(REPLICA);
    expect(route.divert_timeout).toBe(10_000);
  });

  it("takes divert_timeout as a duration", () => {
    const r = loadConfig({
      ORIGIN_URL,
      SLUICE: routeWith({ on_limit: "divert", divert_url: REPLICA, divert_timeout: "750ms" }),
    });
    if (!r.ok) throw r.error;
    expect(r.config.routes[0]!.divert_timeout).toBe(750);
  });

  it("leaves routes without it untouched", () => {
    const r = loadConfig({ ORIGIN_URL, SLUICE: routeWith({}) });
    if (!r.ok) throw r.error;
    expect(r.config.routes[0]!.divertUrl).toBeUndefined();
  });

  it.each([
    ["divert without divert_url", { on_limit: "divert" }, "divert_url", /is required when on_limit = "divert"/],
    ["divert_url with reject", { on_limit: "reject", divert_url: REPLICA }, "divert_url", /applies only when/],
    ["divert_url with the default", { divert_url: REPLICA }, "divert_url", /applies only when/],
    ["divert_url with fallback", { on_limit: "fallback", divert_url: REPLICA }, "divert_url", /applies only when/],
    ["an ftp divert_url", { on_limit: "divert", divert_url: "ftp://mirror.example.com/" }, "divert_url", /http/],
    ["a divert_url that is no URL", { on_limit: "divert", divert_url: "replica" }, "divert_url", /http/],
    [
      "a bad divert_timeout",
      { on_limit: "divert", divert_url: REPLICA, divert_timeout: "ten seconds" },
      "divert_timeout",
      /not a duration/,
    ],
    [
      "divert with idempotency",
      { on_limit: "divert", divert_url: REPLICA, idempotency: { required: true } },
      "idempotency",
      /cannot be combined with on_limit = "divert"/,
    ],
    [
      "divert with a session",
      { on_limit: "divert", divert_url: REPLICA, session: { key: "header:x-session-id" } },
      "session",
      /cannot be combined with on_limit = "divert"/,
    ],
  ])("refuses %s, naming the field", (_, over, field, problem) => {
    const error = errorOf(over);
    expect(error.field).toBe(`SLUICE.routes[0].${field}`);
    expect(error.problem).toMatch(problem);
  });

  it("shows the divert URL in GET /__sluice/config without the credentials it may carry", async () => {
    const token = "unit-admin-token-0123456789";
    const env: Env = {
      ORIGIN_URL,
      SLUICE: routeWith({ on_limit: "divert", divert_url: "https://reader:pw-0123@replica.example.com/v1" }),
      SLUICE_ADMIN_TOKEN: token,
    };
    const res = await adminApp(new Runtime()).request(
      "http://sluice.test/__sluice/config",
      { headers: { authorization: `Bearer ${token}` } },
      env,
    );
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain("pw-0123");
    const { routes } = JSON.parse(text) as { routes: Array<Record<string, unknown>> };
    expect(routes[0]).toMatchObject({ on_limit: "divert", divert_url: REPLICA, divert_timeout: 10_000 });
    expect(routes[0]).not.toHaveProperty("divertUrl");
  });
});
