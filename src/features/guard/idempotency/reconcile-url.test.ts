import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../config/index.js";
import { idempotency } from "../../../index.js";
import { originalStatus } from "./reconcile.js";
import { reconcileHostProblem, reconcileTemplateProblem, reconcileUrl } from "./reconcile-url.js";

const ORIGIN_URL = "https://api.example.com/v1";

/** A configuration with one idempotent route whose idempotency table adds `extra`. */
function load(extra: Record<string, unknown>, route: Record<string, unknown> = {}) {
  return loadConfig({
    ORIGIN_URL,
    SLUICE: { routes: [{ name: "orders", match: "/orders", idempotency: extra, ...route }] },
  });
}

function errorOf(r: ReturnType<typeof load>): string {
  if (r.ok) throw new Error("expected the configuration to be refused");
  return r.error.message;
}

describe("idempotency.reconcile: the configuration", () => {
  it("takes the defaults: no reconcile, reconcile_timeout 2 s, reconcile_after 1 min", () => {
    const r = load({});
    if (!r.ok) throw new Error(r.error.message);
    const i = r.config.routes[0]?.idempotency;
    expect([i?.reconcile, i?.reconcile_timeout, i?.reconcile_after]).toEqual([undefined, 2_000, 60_000]);
  });

  it("takes a path on the origin, and durations", () => {
    const r = load({ reconcile: "/orders/by-key/{key}", reconcile_timeout: "500ms", reconcile_after: "5m" });
    if (!r.ok) throw new Error(r.error.message);
    const i = r.config.routes[0]?.idempotency;
    expect([i?.reconcile, i?.reconcile_timeout, i?.reconcile_after]).toEqual(["/orders/by-key/{key}", 500, 300_000]);
  });

  it("names the field of a target that is neither a path nor an https URL", () => {
    for (const bad of ["orders/{key}", "//evil.example/{key}", "http://api.example.com/{key}", "/a#b"])
      expect(errorOf(load({ reconcile: bad })), bad).toMatch(
        /^SLUICE\.routes\[0\] \("orders"\)\.idempotency\.reconcile: /,
      );
    expect(errorOf(load({ reconcile: "https://u:p@api.example.com/{key}" }))).toContain("without credentials");
  });

  it("names the field of a bad duration", () => {
    expect(errorOf(load({ reconcile_timeout: "2 seconds" }))).toMatch(/idempotency\.reconcile_timeout: /);
    expect(errorOf(load({ reconcile_after: 60 }))).toMatch(/idempotency\.reconcile_after: /);
  });

  it("trusts a full URL only on the origin's host or one the route's queue.callbacks allows", () => {
    expect(load({ reconcile: "https://api.example.com/orders/{key}" }).ok).toBe(true);
    const elsewhere = errorOf(load({ reconcile: "https://ledger.example.net/orders/{key}" }));
    expect(elsewhere).toMatch(/idempotency\.reconcile: is on ledger\.example\.net, which is neither/);
    const allowed = load(
      { reconcile: "https://ledger.example.net/orders/{key}" },
      { queue: { callbacks: ["https://ledger.example.net/orders/*"] } },
    );
    expect(allowed.ok).toBe(true);
    // another port of the origin's host is another origin
    expect(load({ reconcile: "https://api.example.com:8443/{key}" }).ok).toBe(false);
  });

  it("holds in the middleware's options too: an app has no origin, so a full URL must be allowed", () => {
    expect(() => idempotency({ reconcile: "https://ledger.example.net/orders/{key}" })).toThrow(
      /idempotency\(\): reconcile: is on ledger\.example\.net/,
    );
    expect(() => idempotency({ reconcile: "/orders/{key}", reconcile_timeout: "1s" })).not.toThrow();
  });
});

describe("reconcileUrl", () => {
  const origin = new URL(ORIGIN_URL);

  it("joins a path to the origin, its prefix and a query kept, the key URL-encoded", () => {
    expect(reconcileUrl("/orders/by-key/{key}", origin, "order 1/ü")).toBe(
      "https://api.example.com/v1/orders/by-key/order%201%2F%C3%BC",
    );
    expect(reconcileUrl("/orders?key={key}", new URL("https://api.example.com/"), "a&b")).toBe(
      "https://api.example.com/orders?key=a%26b",
    );
  });

  it("fills a full URL, and gives nothing for a path without an origin", () => {
    expect(reconcileUrl("https://ledger.example.net/k/{key}", origin, "x")).toBe("https://ledger.example.net/k/x");
    expect(reconcileUrl("/orders/{key}", undefined, "x")).toBeUndefined();
    // dot segments: resolved by any URL parser, encoded or not, so never asked about
    expect(reconcileUrl("/orders/by-key/{key}", origin, "..")).toBeUndefined();
  });

  it("never lets a key leave its path segment or reach another host", () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 255 }), (key) => {
        const built = reconcileUrl("/orders/by-key/{key}", origin, key);
        // a statement, not the property's result: `toContain` returns its assertion object, neither
        // `true` nor undefined, which fast-check took for a failed property whenever it drew "." or ".."
        if (built === undefined) {
          expect([".", ".."]).toContain(key);
          return;
        }
        const url = new URL(built);
        expect(url.host).toBe("api.example.com");
        expect(url.pathname.startsWith("/v1/orders/by-key/")).toBe(true);
        expect(url.pathname.split("/")).toHaveLength(5);
        expect(decodeURIComponent(url.pathname.split("/")[4] ?? "")).toBe(key);
        expect(url.search).toBe("");
      }),
    );
  });

  it("reads the template rules and the host rule as the loader does", () => {
    expect(reconcileTemplateProblem("/x/{key}")).toBeUndefined();
    expect(reconcileTemplateProblem("x".repeat(2_049))).toMatch(/at most/);
    expect(reconcileHostProblem("/x/{key}", undefined, [])).toBeUndefined();
    expect(reconcileHostProblem("https://other.example/{key}", undefined, [])).toMatch(/other\.example/);
  });
});

describe("Sluice-Original-Status", () => {
  it("defaults to 201, takes a final status, refuses anything else", () => {
    expect(originalStatus(null)).toBe(201);
    expect(originalStatus("200")).toBe(200);
    expect(originalStatus(" 409 ")).toBe(409);
    for (const bad of ["", "abc", "100", "199", "600", "2000", "20 1"])
      expect(originalStatus(bad), bad).toBeUndefined();
  });
});
