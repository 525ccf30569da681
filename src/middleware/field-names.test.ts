/**
 * Configuration errors name their field as people read it (issue 30, point 10): the path, with
 * the name of each route and limit on the way (`SLUICE.routes[4] ("orders").limits[0] ("per-ip").rate`),
 * wherever a field is named: `[vars.SLUICE]`, the middleware's options, `adminApi()`, `limiter()`.
 * `field` keeps the bare path, for programs.
 */
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../config/index.js";
import { fieldError } from "../config/load.js";
import { adminApi } from "./admin-api.js";
import { idempotency } from "./idempotency.js";
import { limiter } from "./limiter.js";
import { rateLimit } from "./rate-limit.js";

const ORIGIN_URL = "https://origin.example";
const ok = (name: string) => ({ name, match: `/${name}`, limits: [{ name: "per-ip", rate: 1, period: "1s" }] });

function errorOf(SLUICE: unknown, vars: { hasQueue?: boolean } = {}): ConfigError {
  const r = loadConfig({ ORIGIN_URL, SLUICE, ...vars });
  if (r.ok) throw new Error("expected an invalid configuration");
  return r.error;
}

describe("a configuration error's field", () => {
  it('names the route and the limit beside their index: routes[4] ("orders").limits[0] ("per-ip").rate', () => {
    const orders = { name: "orders", match: "/orders", limits: [{ name: "per-ip", rate: 0, period: "1s" }] };
    const e = errorOf({ routes: [ok("a"), ok("b"), ok("c"), ok("d"), orders] });
    expect(e.field).toBe("SLUICE.routes[4].limits[0].rate");
    expect(e.label).toBe('SLUICE.routes[4] ("orders").limits[0] ("per-ip").rate');
    expect(e.message).toMatch(/^SLUICE\.routes\[4\] \("orders"\)\.limits\[0\] \("per-ip"\)\.rate: /);
  });

  it("names them in the checks made after the schema's too (exactness, the queue binding)", () => {
    const tiers = { name: "t", key: "header:x-u", rate: 10, period: "1s", tier: "header:x-plan", rates: {} };
    const exact = errorOf({
      routes: [{ name: "api", match: "/a", limits: [{ ...tiers, rates: { free: "1000/999999999d" } }] }],
    });
    expect(exact.message).toMatch(/^SLUICE\.routes\[0\] \("api"\)\.limits\[0\] \("t"\)\.rates\.free: tier "free"/);
    const queued = errorOf({ routes: [{ ...ok("sms"), on_limit: "queue" }] }, { hasQueue: false });
    expect(queued.message).toMatch(/^SLUICE\.routes\[0\] \("sms"\)\.on_limit: is "queue"/);
  });

  it("leaves out a name that is missing or not text, and quotes one that needs it", () => {
    const root = { SLUICE: { routes: [{ match: "/x" }, { name: 7 }, { name: 'say "hi"' }] } };
    expect(fieldError(["SLUICE", "routes", 0, "name"], "is required", root).label).toBe("SLUICE.routes[0].name");
    expect(fieldError(["SLUICE", "routes", 1, "name"], "not text", root).label).toBe("SLUICE.routes[1].name");
    expect(fieldError(["SLUICE", "routes", 2, "name"], "odd", root).label).toBe(
      'SLUICE.routes[2] ("say \\"hi\\"").name',
    );
  });
});

describe("a middleware's option error", () => {
  it("names the limit as the options spell it", () => {
    expect(() => rateLimit({ limits: [{ name: "per-ip", rate: 0, period: "1s" }] })).toThrow(
      /^rateLimit\(\): limits\[0\] \("per-ip"\)\.rate: /,
    );
    expect(() => idempotency({ lease: "1d", ttl: "1h" })).toThrow(/^idempotency\(\): lease: /);
    expect(() => limiter({ limits: [{ name: "c", algorithm: "concurrency", limit: 2, lease: "1m" }] })).toThrow(
      /^limiter\(\): limits\[0\] \("c"\)\.algorithm: /,
    );
  });

  it("names the route and limit of adminApi()'s config", () => {
    const routes = [{ name: "api", match: "/api/*", limits: [{ name: "per-ip", rate: 0, period: "1s" }] }];
    expect(() => adminApi({ config: { routes } })).toThrow(
      /^adminApi\(\): config\.routes\[0\] \("api"\)\.limits\[0\] \("per-ip"\)\.rate: /,
    );
    expect(() => adminApi({ on_store_error: "sometimes" as "open" })).toThrow(/^adminApi\(\): on_store_error: /);
  });
});
