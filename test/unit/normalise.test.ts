import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/index.js";
import { compilePattern, matchesPattern } from "../../src/routing/match.js";
import { normalisePath } from "../../src/routing/normalise.js";
import { findRoute } from "../../src/routing/route.js";

const match = (raw: string) => {
  const r = normalisePath(raw);
  if (!r.ok) throw new Error(r.detail);
  return r.path;
};

describe("normalisePath", () => {
  it.each([
    ["/api/x", "/api/x", "/api/x"],
    ["//api/x", "/api/x", "/api/x"],
    ["/api//x", "/api/x", "/api/x"],
    ["/API/X", "/API/X", "/api/x"],
    ["/api/./x", "/api/x", "/api/x"],
    ["/api/%78", "/api/x", "/api/x"],
    ["/api/x/", "/api/x/", "/api/x"],
    ["/a/../api/x", "/api/x", "/api/x"],
    ["/a/%2e%2e/api/x", "/api/x", "/api/x"],
    ["/a/%2E%2E/api/x", "/api/x", "/api/x"],
    ["/api/%2e/x", "/api/x", "/api/x"],
    ["/api%2Fx", "/api%2Fx", "/api/x"],
    ["/api%2fx", "/api%2Fx", "/api/x"],
    ["/api%5Cx", "/api%5Cx", "/api/x"],
    ["/api\\x", "/api/x", "/api/x"],
    ["/../../api/x", "/api/x", "/api/x"],
    ["/api/x/.", "/api/x/", "/api/x"],
    ["/api/caf%c3%a9", "/api/caf%C3%A9", "/api/caf%c3%a9"],
    ["/", "/", "/"],
    ["", "/", "/"],
  ])("%s forwards as %s and matches as %s", (raw, forward, matchPath) => {
    expect(match(raw)).toEqual({ forward, match: matchPath });
  });

  it.each(["/api/%zz", "/api/%4", "/api/%00x"])("refuses %s with 400", (raw) => {
    expect(normalisePath(raw)).toMatchObject({ ok: false, status: 400 });
  });

  it("refuses an overlong path with 414", () => {
    expect(normalisePath("/" + "a".repeat(5000))).toMatchObject({ ok: false, status: 414 });
  });
});

describe("route patterns", () => {
  it("a trailing * covers the path itself and everything below", () => {
    const p = compilePattern("/api/products/*");
    expect(matchesPattern(p, "/api/products")).toBe(true);
    expect(matchesPattern(p, "/api/products/1")).toBe(true);
    expect(matchesPattern(p, "/api/products/1/reviews")).toBe(true);
    expect(matchesPattern(p, "/api/productsx")).toBe(false);
    expect(matchesPattern(p, "/api")).toBe(false);
  });

  it("an inner * is exactly one segment; patterns are normalised like paths", () => {
    const p = compilePattern("/API/*/orders/");
    expect(matchesPattern(p, "/api/7/orders")).toBe(true);
    expect(matchesPattern(p, "/api/orders")).toBe(false);
    expect(matchesPattern(p, "/api/7/8/orders")).toBe(false);
  });

  const cfg = loadConfig({
    ORIGIN_URL: "https://o.example",
    SLUICE: {
      routes: [
        { name: "reads", match: "/api/x", methods: ["get"], limits: [] },
        { name: "all", match: "/api/*", limits: [] },
      ],
    },
  });
  if (!cfg.ok) throw cfg.error;

  it("first matching route wins; HEAD counts as GET; methods are case-insensitive", () => {
    expect(findRoute(cfg.config.routes, "GET", "/api/x")?.name).toBe("reads");
    expect(findRoute(cfg.config.routes, "HEAD", "/api/x")?.name).toBe("reads");
    expect(findRoute(cfg.config.routes, "POST", "/api/x")?.name).toBe("all");
    expect(findRoute(cfg.config.routes, "GET", "/other")).toBeUndefined();
  });

  // Every spelling of a limited path must land on the limited route (the table of issue 2 and 5).
  it.each(["//api/x", "/API/x", "/api/./x", "/api/%78", "/api/x/", "/a/../api/x", "/api%2Fx", "/%61pi/x", "/api/x//", "/api/X/."])(
    "%s cannot dodge the route of /api/x",
    (raw) => {
      expect(findRoute(cfg.config.routes, "GET", match(raw).match)?.name).toBe("reads");
    },
  );
});

describe("path policy", () => {
  const sensitive = { case: "sensitive", trailing_slash: "strict" } as const;

  it("case = sensitive keeps case for matching; trailing_slash = strict keeps the slash", () => {
    expect(normalisePath("/API/x/", sensitive)).toEqual({ ok: true, path: { forward: "/API/x/", match: "/API/x/" } });
    const p = compilePattern("/api/x", sensitive);
    expect(matchesPattern(p, "/api/x")).toBe(true);
    expect(matchesPattern(p, "/API/x")).toBe(false);
    expect(matchesPattern(p, "/api/x/")).toBe(false);
    expect(matchesPattern(compilePattern("/api/x/", sensitive), "/api/x/")).toBe(true);
    expect(matchesPattern(compilePattern("/api/*", sensitive), "/api/x/")).toBe(true);
  });

  it("still resolves the tricks that are never meaningful: //, dot segments, unreserved escapes", () => {
    const m = (raw: string) => {
      const r = normalisePath(raw, sensitive);
      return r.ok ? r.path.match : r.detail;
    };
    expect([m("//api/x"), m("/api/./x"), m("/a/../api/x"), m("/api/%78")]).toEqual(["/api/x", "/api/x", "/api/x", "/api/x"]);
  });
});
