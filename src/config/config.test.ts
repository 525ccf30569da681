import { describe, expect, it } from "vitest";
import { loadConfig, type ConfigError } from "./index.js";
import { parseDuration } from "./duration.js";

const ORIGIN_URL = "https://api.example.com";
const limit = { name: "per-ip", key: "ip", rate: 100, period: "1s" };
const withLimit = (over: Record<string, unknown>) => ({
  routes: [{ name: "r", match: "/api/*", limits: [{ ...limit, ...over }] }],
});

function errorOf(vars: { ORIGIN_URL?: unknown; SLUICE?: unknown }): string {
  return configErrorOf(vars).message;
}

function configErrorOf(vars: { ORIGIN_URL?: unknown; SLUICE?: unknown }): ConfigError {
  const r = loadConfig(vars);
  if (r.ok) throw new Error("expected an invalid configuration");
  return r.error;
}

describe("configuration", () => {
  it("fills defaults the contract names", () => {
    const r = loadConfig({ ORIGIN_URL, SLUICE: withLimit({}) });
    if (!r.ok) throw r.error;
    expect(r.config).toMatchObject({
      key_prefix: "sluice",
      timeout_ms: 50,
      on_store_error: "local",
      rebalance_every: 5000,
    });
    const l = r.config.routes[0]!.limits[0]!;
    expect(l).toMatchObject({
      burst: 100,
      cost: 1,
      algorithm: "token_bucket",
      scope: "region",
      shadow: false,
      key: ["ip"],
      period: 1000,
    });
  });

  it("accepts SLUICE as JSON text", () => {
    expect(loadConfig({ ORIGIN_URL, SLUICE: JSON.stringify(withLimit({})) }).ok).toBe(true);
  });

  it.each([
    [{ ORIGIN_URL, SLUICE: withLimit({ rate: -1 }) }, "SLUICE.routes[0].limits[0].rate"],
    [{ ORIGIN_URL, SLUICE: withLimit({ period: "1 sec" }) }, "SLUICE.routes[0].limits[0].period"],
    [{ ORIGIN_URL, SLUICE: withLimit({ key: "body:x" }) }, "SLUICE.routes[0].limits[0].key"],
    [{ ORIGIN_URL, SLUICE: withLimit({ cost: 5, burst: 2 }) }, "SLUICE.routes[0].limits[0].cost"],
    [{ ORIGIN_URL, SLUICE: withLimit({ rate: 999_983, period: "1d" }) }, "SLUICE.routes[0].limits[0].burst"],
    [{ ORIGIN_URL, SLUICE: withLimit({ bogus: 1 }) }, "SLUICE.routes[0].limits[0]"],
    [{ ORIGIN_URL, SLUICE: withLimit({ name: "bad name" }) }, "SLUICE.routes[0].limits[0].name"],
    [{ ORIGIN_URL, SLUICE: { on_store_error: "maybe" } }, "SLUICE.on_store_error"],
    [{ ORIGIN_URL, SLUICE: withLimit({ scope: "planet" }) }, "SLUICE.routes[0].limits[0].scope"],
    [
      { ORIGIN_URL, SLUICE: { ...withLimit({ scope: "split", rate: 2, burst: 2 }), regions: { eu: {}, ap: {} } } },
      "SLUICE.routes[0].limits[0].scope",
    ],
    [
      {
        ORIGIN_URL,
        SLUICE: {
          routes: [
            { name: "a", match: "/a" },
            { name: "a", match: "/b" },
          ],
        },
      },
      "SLUICE.routes[1].name",
    ],
    [{ ORIGIN_URL, SLUICE: { routes: [{ name: "a", match: "no-slash" }] } }, "SLUICE.routes[0].match"],
    [{ ORIGIN_URL, SLUICE: "{not json" }, "SLUICE"],
    [{ ORIGIN_URL: "ftp://x", SLUICE: {} }, "ORIGIN_URL"],
    [{ SLUICE: {} }, "ORIGIN_URL"],
  ])("names the field at fault (%#)", (vars, field) => {
    const e = configErrorOf(vars);
    // the message names it as people read it: the path, with the names of the routes and limits on the way
    expect(e.label.replace(/ \("[^"]*"\)/g, "")).toBe(field);
    expect(e.field).toBe(field);
    expect(e.message.startsWith(`${e.label}: `)).toBe(true);
  });

  it("a duplicate limit name in one route is named", () => {
    const sluice = { routes: [{ name: "r", match: "/a", limits: [limit, limit] }] };
    expect(errorOf({ ORIGIN_URL, SLUICE: sluice })).toMatch(
      /^SLUICE\.routes\[0\] \("r"\)\.limits\[1\] \("per-ip"\)\.name: duplicate/,
    );
  });

  it("parses durations", () => {
    expect([
      parseDuration("500ms"),
      parseDuration("1s"),
      parseDuration("1m"),
      parseDuration("1h"),
      parseDuration("1d"),
    ]).toEqual([500, 1000, 60_000, 3_600_000, 86_400_000]);
    expect([parseDuration("0s"), parseDuration("1w"), parseDuration("-1s"), parseDuration("1.5s")]).toEqual([
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
  });
});

describe("JWT identities outside limits", () => {
  it.each([
    ["an idempotency principal", { idempotency: { principal: "jwt:sub" } }],
    ["a session key", { session: { key: "jwt:sid" } }],
  ])("%s on a JWT claim needs a secret to verify tokens with", (_, extra) => {
    const r = loadConfig({
      ORIGIN_URL,
      SLUICE: { routes: [{ name: "r", match: "/api/*", ...extra }] },
      hasSecret: () => false,
    });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.message).toMatch(/^SLUICE\.routes\[0\] \("r"\): .*SLUICE_JWT_SECRET/);
    expect(
      loadConfig({ ORIGIN_URL, SLUICE: { routes: [{ name: "r", match: "/api/*", ...extra }] }, hasSecret: () => true })
        .ok,
    ).toBe(true);
  });
});

describe("idempotency and session principals, derived keys", () => {
  const routeWith = (extra: Record<string, unknown>) => ({ routes: [{ name: "r", match: "/api/*", ...extra }] });
  const routeOf = (extra: Record<string, unknown>) => {
    const r = loadConfig({ ORIGIN_URL, SLUICE: routeWith(extra) });
    if (!r.ok) throw r.error;
    return r.config.routes[0]!;
  };

  it('defaults the principal of idempotency keys and session locks to "auto"', () => {
    const route = routeOf({ idempotency: {}, session: { key: "header:x-session-id" } });
    expect(route.idempotency?.principal).toEqual(["auto"]);
    expect(route.session?.principal).toEqual(["auto"]);
    expect(routeOf({ idempotency: { principal: "ip" } }).idempotency?.principal).toEqual(["ip"]);
  });

  it('names the field of a bad principal, and "auto" combined with other parts', () => {
    expect(errorOf({ ORIGIN_URL, SLUICE: routeWith({ idempotency: { principal: "caller" } }) })).toMatch(
      /^SLUICE\.routes\[0\] \("r"\)\.idempotency\.principal: "caller" is not a key.*or "auto"/,
    );
    expect(errorOf({ ORIGIN_URL, SLUICE: routeWith({ idempotency: { principal: ["ip", "auto"] } }) })).toMatch(
      /^SLUICE\.routes\[0\] \("r"\)\.idempotency\.principal\[1\]: "auto" stands alone/,
    );
    expect(
      errorOf({ ORIGIN_URL, SLUICE: routeWith({ session: { key: "header:s", principal: ["ip", "header:"] } }) }),
    ).toMatch(/^SLUICE\.routes\[0\] \("r"\)\.session\.principal\[1\]: /);
  });

  it("takes derive = { fields, window }: the window is how long the derived key's answer is kept", () => {
    const i = routeOf({ idempotency: { derive: { fields: ["/user_id", "/a~1b"], window: "5m" } } }).idempotency!;
    expect(i.derive).toEqual({ fields: ["/user_id", "/a~1b"], window: 300_000 });
    expect(i.ttl).toBe(300_000);
    const plain = routeOf({ idempotency: { derive: true } }).idempotency!;
    expect([plain.derive, plain.ttl]).toEqual([true, 86_400_000]);
  });

  it.each([
    [{ fields: ["user_id"], window: "5m" }, /derive\.fields\[0\]: must be a JSON pointer/],
    [{ fields: ["/a~2"], window: "5m" }, /derive\.fields\[0\]: must be a JSON pointer/],
    [{ fields: [""], window: "5m" }, /derive\.fields\[0\]: must be a JSON pointer/],
    [{ fields: [], window: "5m" }, /derive\.fields: /],
    [{ fields: ["/a"], window: "soon" }, /derive\.window: "soon" is not a duration/],
    [{ fields: ["/a"] }, /derive\.window: /],
    [{ fields: ["/a"], window: "5m", salt: 1 }, /derive: /],
    ["yes", /derive: must be true, false or \{ fields/],
  ])("names the field of a bad derive %j", (derive, message) => {
    expect(errorOf({ ORIGIN_URL, SLUICE: routeWith({ idempotency: { derive } }) })).toMatch(
      new RegExp(`^SLUICE\\.routes\\[0\\] \\("r"\\)\\.idempotency\\.${message.source}`),
    );
  });

  it("refuses a ttl beside derive.fields, and a lease not shorter than the window", () => {
    const fields = { fields: ["/a"], window: "10s" };
    expect(errorOf({ ORIGIN_URL, SLUICE: routeWith({ idempotency: { derive: fields, ttl: "1h" } }) })).toMatch(
      /^SLUICE\.routes\[0\] \("r"\)\.idempotency\.ttl: is derive\.window/,
    );
    expect(errorOf({ ORIGIN_URL, SLUICE: routeWith({ idempotency: { derive: fields } }) })).toMatch(
      /^SLUICE\.routes\[0\] \("r"\)\.idempotency\.lease: must be shorter than derive\.window/,
    );
  });

  it.each([
    ["idempotency.lease", { idempotency: { lease: "999ms" } }],
    ["idempotency.lease", { idempotency: { lease: "50ms", ttl: "1m" } }],
    ["session.lease", { session: { key: "header:x-session-id", lease: "50ms" } }],
  ])("refuses a %s shorter than the renewal loop can keep (1 s), naming it", (field, extra) => {
    expect(errorOf({ ORIGIN_URL, SLUICE: routeWith(extra) })).toMatch(
      new RegExp(`^SLUICE\\.routes\\[0\\]( \\("r"\\))?\\.${field.replace(".", "\\.")}: must be at least "1s"`),
    );
  });

  it("takes a lease of 1 s for idempotency and sessions", () => {
    const route = routeOf({ idempotency: { lease: "1s" }, session: { key: "header:x-session-id", lease: "1s" } });
    expect([route.idempotency?.lease, route.session?.lease]).toEqual([1_000, 1_000]);
  });
});
