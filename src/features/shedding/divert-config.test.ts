/**
 * `on_limit = "divert"` and `divert_on` in the configuration: their fields go together, a divert route takes no
 * idempotency or session table (a diverted request leaves before those steps), every error names
 * its field, and the admin API shows the divert URL without credentials.
 */
import { describe, expect, it } from "vitest";
import { adminApp } from "../../admin/index.js";
import { loadConfig } from "../../config/index.js";
import type { Env } from "../../env.js";
import { Runtime } from "../../runtime.js";

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

  it('defaults divert_on to ["limit"] with on_limit = "divert", and to nothing without a divert_url', () => {
    const diverts = loadConfig({ ORIGIN_URL, SLUICE: routeWith({ on_limit: "divert", divert_url: REPLICA }) });
    const plain = loadConfig({ ORIGIN_URL, SLUICE: routeWith({}) });
    if (!diverts.ok) throw diverts.error;
    if (!plain.ok) throw plain.error;
    expect(diverts.config.routes[0]!.divertOn).toEqual(["limit"]);
    expect(plain.config.routes[0]!.divertOn).toEqual([]);
  });

  it('takes divert_on naming origin failures without on_limit = "divert" (failover)', () => {
    const breaker = { min_requests: 5 };
    const over = { divert_url: REPLICA, divert_on: ["breaker", "5xx", "timeout"], breaker, idempotency: {} };
    const r = loadConfig({ ORIGIN_URL, SLUICE: routeWith(over) });
    if (!r.ok) throw r.error;
    expect(r.config.routes[0]!.on_limit).toBe("reject");
    expect(r.config.routes[0]!.divertOn).toEqual(["breaker", "5xx", "timeout"]);
  });

  it('takes divert_on with "limit" and failures together on a divert route', () => {
    const over = { on_limit: "divert", divert_url: REPLICA, divert_on: ["limit", "5xx"] };
    const r = loadConfig({ ORIGIN_URL, SLUICE: routeWith(over) });
    if (!r.ok) throw r.error;
    expect(r.config.routes[0]!.divertOn).toEqual(["limit", "5xx"]);
  });

  it.each([
    ["divert_on without divert_url", { divert_on: ["5xx"] }, /needs divert_url/],
    ["an empty divert_on", { divert_url: REPLICA, divert_on: [] }, /at least 1|too small|>=1/i],
    ["a reason twice", { divert_url: REPLICA, divert_on: ["5xx", "5xx"] }, /must not name a reason twice/],
    ["an unknown reason", { divert_url: REPLICA, divert_on: ["4xx"] }, /limit|breaker|5xx|timeout/],
    [
      '"limit" without on_limit = "divert"',
      { divert_url: REPLICA, divert_on: ["limit", "5xx"] },
      /needs on_limit = "divert"/,
    ],
    [
      'on_limit = "divert" without "limit"',
      { on_limit: "divert", divert_url: REPLICA, divert_on: ["5xx"] },
      /must name "limit" when on_limit = "divert"/,
    ],
    ['"breaker" without a breaker', { divert_url: REPLICA, divert_on: ["breaker"] }, /no breaker table/],
  ])("refuses %s, naming divert_on", (_, over, problem) => {
    const error = errorOf(over);
    expect(error.field).toMatch(/^SLUICE\.routes\[0\]\.divert_on(\.|\[|$)/);
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
