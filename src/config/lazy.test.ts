/**
 * The configuration's schemas are built on first use, and a field left out builds none: the
 * defaults such a field gets are written out, and must be what its schema gives an empty table.
 */
import { describe, expect, it } from "vitest";
import { loadConfig } from "./index.js";
import * as z from "zod/mini";
import { deferred, lazy } from "./lazy.js";
import { configSchema, pathDefaults, plainConfigSchema } from "./settings.js";
import { queueDefaults } from "../features/shedding/defaults.js";
import { queueSettings } from "../features/shedding/schema.js";

const ORIGIN_URL = "https://api.example.com";

function configOf(SLUICE: Record<string, unknown>) {
  const r = loadConfig({ ORIGIN_URL, SLUICE });
  if (!r.ok) throw r.error;
  return r.config;
}

describe("schemas built on first use", () => {
  it("lazy() builds once, on the first call", () => {
    let builds = 0;
    const value = lazy(() => ({ built: ++builds }));
    expect(builds).toBe(0);
    expect(value()).toBe(value());
    expect(builds).toBe(1);
  });

  it("deferred(): a field left out never builds its schema; one set builds it once and is checked by it", () => {
    let builds = 0;
    const table = () => (builds++, z.strictObject({ n: z.int() }));
    const schema = z.strictObject({ a: z.optional(deferred(table)), b: z._default(deferred(table), { n: 1 }) });
    expect(schema.parse({})).toStrictEqual({ b: { n: 1 } });
    expect(builds).toBe(0);
    expect(schema.parse({ a: { n: 2 } })).toStrictEqual({ a: { n: 2 }, b: { n: 1 } });
    expect(builds).toBe(1);
    const refused = schema.safeParse({ b: { n: "x" } });
    expect(refused.success).toBe(false);
    expect(refused.error?.issues[0]?.path).toStrictEqual(["b", "n"]);
  });

  it("a route without a queue gets what the queue schema gives an empty table, keys in the same order", () => {
    expect(JSON.stringify(queueDefaults())).toBe(JSON.stringify(queueSettings().parse({})));
    const route = (queue?: object) =>
      configOf({ routes: [{ name: "r", match: "/r", ...(queue && { queue }) }] }).routes[0];
    expect(JSON.stringify(route()?.queue)).toBe(JSON.stringify(route({})?.queue));
    // each route its own copy: one route's queue is not another's
    expect(queueDefaults().retry_delays).not.toBe(queueDefaults().retry_delays);
  });

  it("a middleware's route gets the shedding options' defaults without their schemas: the gateway's route, keys in the same order", () => {
    const settings = {
      key_prefix: "p",
      routes: [{ name: "r", match: "/*", limits: [{ name: "l", rate: 5, period: "1s" }], adaptive: {} }],
    };
    const plain = plainConfigSchema().parse(settings);
    expect(JSON.stringify(plain)).toBe(JSON.stringify(configSchema({}).parse(settings)));
    expect(plain.routes[0]?.on_limit).toBe("reject");
    // each route its own queue copy, as the gateway's
    const again = plainConfigSchema().parse(settings);
    expect(again.routes[0]?.queue.retry_delays).not.toBe(plain.routes[0]?.queue.retry_delays);
    // no middleware's options spell a shedding option: one given is refused, not taken
    const given = plainConfigSchema().safeParse({ routes: [{ name: "r", match: "/*", on_limit: "queue" }] });
    expect(given.success).toBe(false);
    expect(given.error?.issues[0]?.path).toStrictEqual(["routes", 0, "on_limit"]);
  });

  it("a configuration without paths gets what the path schema gives an empty table", () => {
    expect(configOf({ paths: {} }).paths).toStrictEqual(pathDefaults());
    expect(configOf({}).paths).toStrictEqual(configOf({ paths: {} }).paths);
  });

  it("a field whose schema is built when it is set still names itself in its error", () => {
    const r = loadConfig({ ORIGIN_URL, SLUICE: { jwt: { alg: "none" } } });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.field).toBe("SLUICE.jwt.alg");
  });
});
