import { describe, expect, it } from "vitest";
import { loadConfig } from "../config/index.js";
import { compilePattern, matchesPattern } from "./match.js";
import { normalisePath } from "./normalise.js";
import { findRoute } from "./route.js";

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
  it.each([
    "//api/x",
    "/API/x",
    "/api/./x",
    "/api/%78",
    "/api/x/",
    "/a/../api/x",
    "/api%2Fx",
    "/%61pi/x",
    "/api/x//",
    "/api/X/.",
  ])("%s cannot dodge the route of /api/x", (raw) => {
    expect(findRoute(cfg.config.routes, "GET", match(raw).match)?.name).toBe("reads");
  });
});

describe("path policy", () => {
  const sensitive = { case: "sensitive", trailing_slash: "strict", parameters: "strip" } as const;

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
    expect([m("//api/x"), m("/api/./x"), m("/a/../api/x"), m("/api/%78")]).toEqual([
      "/api/x",
      "/api/x",
      "/api/x",
      "/api/x",
    ]);
  });
});

describe("path parameters (Tomcat and Spring drop each segment's ;params before resolving dot segments)", () => {
  it.each([
    ["/public/..;/admin", "/public/..;/admin", "/admin"],
    ["/public/..;jsessionid=1/admin", "/public/..;jsessionid=1/admin", "/admin"],
    ["/public/%2e%2e;/admin", "/public/..;/admin", "/admin"],
    ["/public/x/..;/..;/admin", "/public/x/..;/..;/admin", "/admin"],
    ["/admin;x", "/admin;x", "/admin"],
    ["/ADMIN;X/users", "/ADMIN;X/users", "/admin/users"],
    ["/api/x;v=1;w=2/y", "/api/x;v=1;w=2/y", "/api/x/y"],
    ["/;x/admin", "/;x/admin", "/admin"],
    ["/admin/.;x", "/admin/.;x", "/admin"],
    ["/admin%3Bx", "/admin%3Bx", "/admin"],
    ["/admin%3bx", "/admin%3Bx", "/admin"],
    ["/admin;x%2Fy", "/admin;x%2Fy", "/admin"], // stripped before %2F splits: as Tomcat reads the raw path
    ["/a/b;x/..;/admin", "/a/b;x/..;/admin", "/a/admin"],
  ])("%s forwards as %s and matches as %s", (raw, forward, matchPath) => {
    expect(match(raw)).toEqual({ forward, match: matchPath });
  });

  it("keeps the trailing slash a stripped segment leaves, under trailing_slash = strict", () => {
    const strict = { case: "insensitive", trailing_slash: "strict", parameters: "strip" } as const;
    const m = (raw: string) => {
      const r = normalisePath(raw, strict);
      return r.ok ? r.path.match : r.detail;
    };
    expect([m("/admin/;x"), m("/admin/.;x"), m("/admin;x")]).toEqual(["/admin/", "/admin/", "/admin"]);
  });

  it('parameters = "reject" refuses any path with ";" (or %3B) with 400, and leaves others alone', () => {
    const reject = { case: "insensitive", trailing_slash: "ignore", parameters: "reject" } as const;
    for (const raw of ["/public/..;/admin", "/admin;x", "/a;x/../admin", "/admin%3Bx", "/admin%3bx"]) {
      expect(normalisePath(raw, reject), raw).toMatchObject({ ok: false, status: 400 });
    }
    expect(normalisePath("/public/../admin", reject)).toEqual({
      ok: true,
      path: { forward: "/admin", match: "/admin" },
    });
  });

  it("/public/..;/admin and /admin;x land on the /admin route, not /public/*", () => {
    const cfg = loadConfig({
      ORIGIN_URL: "https://o.example",
      SLUICE: {
        routes: [
          { name: "admin", match: "/admin", limits: [] },
          { name: "public", match: "/public/*", limits: [] },
        ],
      },
    });
    if (!cfg.ok) throw cfg.error;
    for (const raw of ["/public/..;/admin", "/admin;x", "/public/%2E%2E;x/admin"]) {
      expect(findRoute(cfg.config.routes, "GET", match(raw).match)?.name, raw).toBe("admin");
    }
    expect(cfg.config.paths.parameters).toBe("strip");
  });

  it("route patterns lose their ;params too, under either policy", () => {
    expect(matchesPattern(compilePattern("/api/x;v=1/*"), "/api/x/1")).toBe(true);
    const reject = { case: "insensitive", trailing_slash: "ignore", parameters: "reject" } as const;
    expect(compilePattern("/api/x;v=1", reject)).toEqual(compilePattern("/api/x"));
  });
});
