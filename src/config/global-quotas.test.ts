/** Shared quotas kept per region: the warnings `npm run check`, the dev start and the Worker print. */
import { describe, expect, it, vi } from "vitest";
import { ConfigCache } from "./cache.js";
import { formatPeriod, globalQuotaWarnings } from "./global-quotas.js";
import { loadConfig, type ConfigResult } from "./index.js";
import type { Env } from "../env.js";

const TWO_REGIONS = { home_region: "us", regions: { eu: { continents: ["EU"] } } };

function sms(limit: Record<string, unknown>, regions: object = TWO_REGIONS): Record<string, unknown> {
  return {
    ...regions,
    routes: [
      { name: "products", match: "/api/products/*", limits: [{ name: "per-ip", key: "ip", rate: 5, period: "1s" }] },
      {
        name: "sms",
        match: "/api/sms",
        limits: [{ name: "provider", key: "global", rate: 400, period: "1s", ...limit }],
      },
    ],
  };
}

function load(sluice: unknown): Extract<ConfigResult, { ok: true }> {
  const r = loadConfig({ ORIGIN_URL: "https://origin.example", SLUICE: sluice });
  if (!r.ok) throw r.error;
  return r;
}

describe("a shared quota kept per region", () => {
  it("is named by route, limit and field, with what the origin will see and the fix", () => {
    const { warnings } = load(sms({}));
    expect(warnings).toHaveLength(1);
    const [w] = warnings;
    expect(w?.route).toBe("sms");
    expect(w?.limit).toBe("provider");
    expect(w?.field).toBe("SLUICE.routes[1].limits[0].scope");
    expect(w?.message).toMatch(/^route "sms", limit "provider": key "global" runs at scope = "region" \(the default\)/);
    expect(w?.message).toContain("in 2 regions (eu, us)");
    expect(w?.message).toContain("400/1s per region × 2 regions = up to 800/1s at the origin");
    expect(w?.message).toMatch(/scope = "global" .* or scope = "split"/);
    expect(w?.message).toContain('write scope = "region" to say so');
  });

  it("multiplies by every region, the home one included", () => {
    const three = { home_region: "us", regions: { eu: { continents: ["EU"] }, ap: { continents: ["AS"] } } };
    const [w] = load(sms({ period: "1m", rate: 600 }, three)).warnings;
    expect(w?.message).toContain("600/1m per region × 3 regions = up to 1800/1m at the origin");
  });

  it("says nothing with one region, however it is written", () => {
    expect(load(sms({}, {})).warnings).toEqual([]);
    expect(load(sms({}, { home_region: "us", regions: { us: { continents: ["NA"] } } })).warnings).toEqual([]);
  });

  it("says nothing for scope global or split", () => {
    expect(load(sms({ scope: "global" })).warnings).toEqual([]);
    expect(load(sms({ scope: "split" })).warnings).toEqual([]);
  });

  it("says nothing for a key with a client part, even alongside global or path", () => {
    for (const key of [
      "ip",
      "header:x-provider",
      "jwt:sub",
      "cookie:sid",
      "query:k",
      ["global", "ip"],
      ["path", "header:x-api-key"],
    ])
      expect(load(sms({ key })).warnings, JSON.stringify(key)).toEqual([]);
  });

  it("counts a key made only of path (and global) as shared, per path", () => {
    const [w] = load(sms({ key: "path" })).warnings;
    expect(w?.message).toContain('key "path"');
    expect(w?.message).toContain("up to 800/1s per path at the origin");
    expect(load(sms({ key: ["global", "path"] })).warnings).toHaveLength(1);
  });

  it('is silenced by scope = "region" written out, a deliberate per-region limit', () => {
    expect(load(sms({ scope: "region" })).warnings).toEqual([]);
    // the same configuration as JSON text, as a Worker's SLUICE variable may be
    expect(load(JSON.stringify(sms({ scope: "region" }))).warnings).toEqual([]);
    expect(load(JSON.stringify(sms({}))).warnings).toHaveLength(1);
  });

  it("speaks of slots in flight for a concurrency cap, whose only fix is global", () => {
    const [w] = load(
      sms({ algorithm: "concurrency", rate: undefined, period: undefined, limit: 20, lease: "30s" }),
    ).warnings;
    expect(w?.message).toContain("20 in flight per region × 2 regions = up to 40 in flight at the origin");
    expect(w?.message).toContain('set scope = "global"');
    expect(w?.message).not.toContain('"split"');
  });

  it("leaves a route's adaptive limit alone: it follows each region's origin latency by design", () => {
    const config = { ...TWO_REGIONS, routes: [{ name: "api", match: "/*", adaptive: { target: "250ms" } }] };
    const r = load(config);
    expect(r.config.routes[0]?.limits.map((l) => [l.name, l.key, l.scope])).toEqual([
      ["adaptive", ["global"], "region"],
    ]);
    expect(r.warnings).toEqual([]);
  });

  it("is pure: the parsed configuration and what was written are all it reads", () => {
    const written = sms({});
    const { config } = load(written);
    expect(globalQuotaWarnings(config, written)).toHaveLength(1);
    expect(globalQuotaWarnings(config, sms({ scope: "region" }))).toEqual([]);
  });

  it("writes periods as the configuration does", () => {
    expect([1_000, 60_000, 90_000, 3_600_000, 86_400_000, 1_500].map(formatPeriod)).toEqual([
      "1s",
      "1m",
      "90s",
      "1h",
      "1d",
      "1500ms",
    ]);
  });
});

describe("the Worker's log", () => {
  it("logs config_warning once per isolate and configuration, when the configuration is loaded", () => {
    const warn = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      const cache = new ConfigCache();
      const env = { ORIGIN_URL: "https://origin.example", SLUICE: sms({}) } as unknown as Env;
      for (let i = 0; i < 3; i++) expect(cache.of(env).ok).toBe(true);
      expect(warn).toHaveBeenCalledTimes(1);
      const line = JSON.parse(String(warn.mock.calls[0]?.[0])) as Record<string, string>;
      expect(line).toMatchObject({ event: "config_warning", route: "sms", limit: "provider" });
      expect(line.field).toBe("SLUICE.routes[1].limits[0].scope");
      expect(line.message).toContain("up to 800/1s at the origin");
      cache.of({ ...env, SLUICE: sms({ scope: "split" }) } as Env);
      expect(warn).toHaveBeenCalledTimes(1);
    } finally {
      warn.mockRestore();
    }
  });
});
