import { describe, expect, it } from "vitest";
import { loadConfig, type Route } from "../config/index.js";
import { originRequest } from "../origin/forward.js";
import { chooseRoute, overrideOf, withoutOverride } from "./method.js";

function routesOf(routes: Record<string, unknown>[]): Route[] {
  const loaded = loadConfig({ ORIGIN_URL: "https://origin.test", SLUICE: { routes } });
  if (!loaded.ok) throw loaded.error;
  return loaded.config.routes;
}

const post = (headers: Record<string, string>, method = "POST") =>
  new Request("https://sluice.test/x/1", { method, headers });

describe("overrideOf", () => {
  it.each([
    [{ "x-http-method-override": "delete" }, "DELETE"],
    [{ "x-http-method": " PATCH\t" }, "PATCH"],
    [{ "x-method-override": "PUT", "x-http-method-override": "put" }, "PUT"],
    [{ "x-http-method-override": "DELETE", "x-http-method": "PATCH" }, undefined],
    [{ "x-http-method-override": "DELETE, GET" }, undefined],
    [{ "x-http-method-override": "PURGE" }, undefined],
    [{}, undefined],
  ])("%j → %s", (headers, want) => {
    expect(overrideOf(new Headers(headers))).toBe(want);
  });
});

describe("chooseRoute", () => {
  const routes = routesOf([
    { name: "opted", match: "/x/*", methods: ["DELETE"], method_override: true },
    { name: "posts", match: "/x/*", methods: ["POST"] },
    { name: "plain", match: "/y/*", methods: ["DELETE"] },
  ]);

  it("honours the override of a POST when the route that method meets opts in", () => {
    const chosen = chooseRoute(routes, post({ "x-http-method-override": "delete" }), "/x/1");
    expect(chosen).toMatchObject({ route: { name: "opted" }, method: "DELETE", overridden: true });
  });

  it("otherwise decides on the request's own method", () => {
    expect(chooseRoute(routes, post({ "x-http-method-override": "DELETE" }), "/y/1")).toMatchObject({
      route: undefined,
      method: "POST",
      overridden: false,
    });
    // only a POST is overridden, as the frameworks that honour the header do
    expect(chooseRoute(routes, post({ "x-http-method-override": "DELETE" }, "PUT"), "/x/1")).toMatchObject({
      route: undefined,
      method: "PUT",
      overridden: false,
    });
    expect(chooseRoute(routes, post({}), "/x/1")).toMatchObject({ route: { name: "posts" }, method: "POST" });
  });
});

describe("forwarding", () => {
  const target = { origin: new URL("https://origin.test"), path: "/x/1", clientIp: "203.0.113.9" };
  const all = { "x-http-method-override": "DELETE", "x-http-method": "DELETE", "x-method-override": "DELETE" };

  it("strips the override headers unless the target honours them", () => {
    const stripped = originRequest(post(all), target).headers;
    expect([...stripped.keys()].filter((h) => h in all)).toEqual([]);
    const kept = originRequest(post(all), { ...target, methodOverride: true }).headers;
    expect(kept.get("x-http-method-override")).toBe("DELETE");
  });

  it("withoutOverride gives the request without them, its body intact", async () => {
    const req = new Request("https://sluice.test/x/1", { method: "POST", headers: all, body: "payload" });
    const out = withoutOverride(req);
    expect([...out.headers.keys()].filter((h) => h in all)).toEqual([]);
    expect(await out.text()).toBe("payload");
    const clean = post({});
    expect(withoutOverride(clean)).toBe(clean);
  });
});
