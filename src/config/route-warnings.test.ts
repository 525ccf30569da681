/**
 * The routes' warnings (issue 30, point 6): a route that limits, guards and sheds nothing, and a
 * route that can never match, which `npm run check`, the dev start and the Worker's log tell.
 */
import { describe, expect, it } from "vitest";
import { loadConfig, type ConfigWarning } from "./index.js";

function warningsOf(routes: unknown[], extra: Record<string, unknown> = {}): ConfigWarning[] {
  const r = loadConfig({ ORIGIN_URL: "https://origin.example", SLUICE: { ...extra, routes }, hasQueue: true });
  if (!r.ok) throw r.error;
  return r.warnings;
}

const PRODUCTS = {
  name: "products",
  match: "/api/products/*",
  methods: ["GET"],
  limits: [{ name: "per-ip", key: "ip", rate: 5, period: "1s" }],
};

describe("a route that limits, guards and sheds nothing", () => {
  it("is told, and so is the limited route it shadows (the issue's /api/* with limits = [] first)", () => {
    const [idle, never, ...rest] = warningsOf([{ name: "api", match: "/api/*", limits: [] }, PRODUCTS]);
    expect(rest).toEqual([]);
    expect(idle).toMatchObject({ route: "api", field: "SLUICE.routes[0]" });
    expect(idle?.message).toMatch(/^route "api" limits, guards and sheds nothing/);
    expect(idle?.message).toContain('("/api/*") are forwarded as if no route matched');
    expect(never).toMatchObject({ route: "products", field: "SLUICE.routes[1].match" });
    expect(never?.message).toMatch(
      /^route "products" can never match: every GET request it matches \("\/api\/products\/\*"\) is matched first by route "api"/,
    );
  });

  it.each([
    ["a limit", { limits: [{ name: "l", key: "ip", rate: 1, period: "1s" }] }],
    ["an adaptive limit", { adaptive: { target: "250ms" } }],
    ["idempotency", { idempotency: { ttl: "1h" } }],
    ["a session", { session: { key: "header:x-session" } }],
    ["a breaker", { breaker: { window: "10s", min_requests: 10, error_ratio: 0.5, cooldown: "10s" } }],
    ["on_limit = fallback (copies kept for the degrade switch)", { on_limit: "fallback" }],
    ["a static fallback", { fallback: { body: "later" } }],
    ["failover to a divert_url", { divert_url: "https://mirror.example", divert_on: ["5xx"] }],
    ["a peek at another route", { peek: "other" }],
    ["a method override honoured", { method_override: true }],
    ["an origin timeout of its own", { origin_timeout: "5s" }],
  ])("is not told of a route with %s", (_what, fields) => {
    const other = { name: "other", match: "/other", limits: [{ name: "l", key: "ip", rate: 1, period: "1s" }] };
    expect(warningsOf([{ name: "r", match: "/r", ...fields }, other])).toEqual([]);
  });
});

describe("a route that can never match", () => {
  it("names every earlier route that takes its requests", () => {
    const [w] = warningsOf([
      { ...PRODUCTS, name: "reads", match: "/x", methods: ["GET"] },
      { ...PRODUCTS, name: "writes", match: "/x", methods: ["POST"] },
      { ...PRODUCTS, name: "both", match: "/x", methods: ["GET", "POST"] },
    ]);
    expect(w?.message).toContain(
      'every GET/POST request it matches ("/x") is matched first by routes "reads", "writes"',
    );
  });

  it("is not told when some method or path still reaches it", () => {
    expect(warningsOf([PRODUCTS, { ...PRODUCTS, name: "writes", methods: ["POST"] }])).toEqual([]);
    expect(warningsOf([PRODUCTS, { ...PRODUCTS, name: "all", match: "/api/*" }])).toEqual([]);
  });

  it('reads the paths policy: /a/ is not /a under trailing_slash = "strict"', () => {
    const twice = [
      { ...PRODUCTS, name: "bare", match: "/a" },
      { ...PRODUCTS, name: "slash", match: "/a/" },
    ];
    expect(warningsOf(twice).map((w) => w.route)).toEqual(["slash"]);
    expect(warningsOf(twice, { paths: { trailing_slash: "strict" } })).toEqual([]);
  });
});
