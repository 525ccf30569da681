import { describe, expect, it } from "vitest";
import { hourOfRoute, liveSlots, quantile, regionFigures } from "./figures.js";
import { latencyBucket } from "../metrics/histogram.js";
import { loadConfig, type Config } from "../config/index.js";

function config(): Config {
  const r = loadConfig({
    ORIGIN_URL: "https://o.example/",
    SLUICE: { home_region: "home", regions: { eu: { continents: ["EU"] } } },
  });
  if (!r.ok) throw r.error;
  return r.config;
}

/** 60 empty minutes, with `recent` as the last ones (the current minute last). */
function hour(...recent: Array<Record<string, number>>): Array<Record<string, number>> {
  return [...Array.from({ length: 60 - recent.length }, () => ({})), ...recent];
}

describe("regionFigures", () => {
  it("averages decisions per second over the last five minutes, the current one as far as it has gone", () => {
    const nowMs = 1_000 * 60_000 + 30_000; // 30 s into the current minute: 4 × 60 + 30 = 270 s
    const h = hour({ "region:eu|allow": 270 }, {}, {}, {}, { "region:eu|reject": 27, "region:eu|allow": 270 });
    const figures = regionFigures(config(), h, nowMs);
    expect(figures.map((r) => r.region)).toEqual(["eu", "home"]);
    const [eu, home] = figures;
    expect(eu?.per_second).toEqual({
      allow: 2,
      reject: 0.1,
      fallback: 0,
      queued: 0,
      replay: 0,
      shadow: 0,
      diverted: 0,
      degraded: 0,
    });
    expect(home).toMatchObject({ region: "home", rtt_p50_ms: null, rtt_p99_ms: null, local_share: 0 });
    expect(home?.per_second.allow).toBe(0);
  });

  it("reads p50 and p99 from the round-trip histogram, and the local share", () => {
    const fields: Record<string, number> = {
      "region:eu|allow": 100,
      "region:eu|local": 80,
      [`rtt:eu|${latencyBucket(2)}`]: 90,
      [`rtt:eu|${latencyBucket(40)}`]: 10,
    };
    const eu = regionFigures(config(), hour(fields), 0).find((r) => r.region === "eu");
    expect(eu?.rtt_p50_ms).toBe(2);
    expect(eu?.rtt_p99_ms).toBeCloseTo(2 ** (latencyBucket(40) / 4), 1);
    expect(eu?.rtt_p99_ms).toBeGreaterThanOrEqual(40);
    expect(eu?.local_share).toBe(0.8);
  });

  it("counts each minute's share of decisions made while Redis failed as seconds degraded, over the hour", () => {
    const h = hour();
    h[0] = { "region:home|degraded": 30, "region:home|store-failed": 30 }; // a whole minute: 60 s
    h[10] = { "region:home|allow": 75, "region:home|reject": 5, "region:home|store-failed": 20 }; // a quarter: 15 s
    const home = regionFigures(config(), h, 0).find((r) => r.region === "home");
    expect(home?.degraded_seconds).toBe(75);
  });
});

describe("hourOfRoute", () => {
  it("sums each limit's decisions over the hour and the route's bans", () => {
    const h = hour(
      { "api|-|allow": 10, "api|per-ip|reject": 3, "ban:api|per-ip": 1, "other|-|allow": 5 },
      { "api|per-ip|shadow": 2, "api|breaker|fallback": 1, "ban:api|per-key": 2, "region:home|allow": 9 },
    );
    expect(hourOfRoute("api", h, new Set(["allow", "shadow", "degraded", "replay"]))).toEqual({
      limits: [
        { limit: "-", allowed: 10, shed: 0 },
        { limit: "breaker", allowed: 0, shed: 1 },
        { limit: "per-ip", allowed: 2, shed: 3 },
      ],
      bans: 3,
    });
  });
});

describe("quantile", () => {
  it("is null for an empty histogram, else the upper bound of the bucket holding the quantile", () => {
    expect(quantile(new Map(), 0.5)).toBeNull();
    expect(quantile(new Map([[0, 5]]), 0.99)).toBe(1);
    expect(
      quantile(
        new Map([
          [8, 1],
          [4, 1],
        ]),
        0.5,
      ),
    ).toBe(2);
  });
});

describe("liveSlots", () => {
  it("counts the slots of a concurrency bucket whose expiry is still ahead, and nothing of another value", () => {
    const now = 1_800_000_000_000;
    const value = `c:a@${(now + 5_000) * 1000},b@${(now - 1) * 1000},c@${(now + 1) * 1000}`;
    expect(liveSlots(value, now)).toBe(2);
    expect(liveSlots("c:", now)).toBe(0);
    expect(liveSlots(null, now)).toBe(0);
    expect(liveSlots("12:1:3", now)).toBe(0);
  });
});
