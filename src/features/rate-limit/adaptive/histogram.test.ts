/**
 * The adaptive limit's pure parts: its configuration (every error names its field; the route gets
 * one concurrency limit named "adaptive", per region) and the latency histogram the isolates
 * report with (a percentile read from it is at most 2^(1/4) above the true one).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { bucketBound, LAST_BUCKET, latencyBucket, serialiseHistogram } from "../../../metrics/histogram.js";
import { loadConfig } from "../../../config/index.js";

const ORIGIN_URL = "https://api.example.com";
const routeWith = (over: Record<string, unknown>) => ({
  routes: [{ name: "r", match: "/api/*", limits: [{ name: "per-ip", rate: 1, period: "1s" }], ...over }],
});

function errorOf(over: Record<string, unknown>): string {
  const r = loadConfig({ ORIGIN_URL, SLUICE: routeWith(over) });
  if (r.ok) throw new Error("expected an invalid configuration");
  return `${r.error.field}: ${r.error.problem}`;
}

describe("adaptive in the configuration", () => {
  it("gives the route a concurrency limit named adaptive: one bucket per region, initial slots, a lease of origin_timeout + 5 s", () => {
    const r = loadConfig({ ORIGIN_URL, SLUICE: routeWith({ origin_timeout: "10s", adaptive: { target: "250ms" } }) });
    if (!r.ok) throw r.error;
    const route = r.config.routes[0]!;
    expect(route.adaptive).toMatchObject({
      latency: "p90",
      target: 250,
      initial: 10,
      min: 1,
      max: 200,
      interval: 1000,
    });
    const adaptive = route.limits.find((l) => l.name === "adaptive")!;
    expect(route.limits.map((l) => l.name)).toEqual(["per-ip", "adaptive"]);
    expect(adaptive).toMatchObject({
      algorithm: "concurrency",
      key: ["global"],
      scope: "region",
      rate: 10,
      period: 15_000,
    });
  });

  it("passes a reserve on to the limit, so the lowest priority is shed first", () => {
    const r = loadConfig({ ORIGIN_URL, SLUICE: routeWith({ adaptive: { reserve: { critical: 0.25 }, lease: "1m" } }) });
    if (!r.ok) throw r.error;
    expect(r.config.routes[0]!.limits[1]).toMatchObject({ reserve: { critical: 0.25 }, period: 60_000 });
  });

  it("names the field of every mistake", () => {
    expect(errorOf({ adaptive: { min: 5, max: 4, initial: 4 } })).toBe(
      "SLUICE.routes[0].adaptive.min: 5 is above max 4",
    );
    expect(errorOf({ adaptive: { initial: 300 } })).toBe(
      "SLUICE.routes[0].adaptive.initial: must be within min 1 and max 200",
    );
    expect(errorOf({ adaptive: { interval: "50ms" } })).toBe(
      "SLUICE.routes[0].adaptive.interval: must be from 100ms to 1m",
    );
    expect(errorOf({ adaptive: { latency: "p42" } })).toMatch(/^SLUICE\.routes\[0\]\.adaptive\.latency: /);
    expect(errorOf({ adaptive: { max: 5000 } })).toMatch(/^SLUICE\.routes\[0\]\.adaptive\.max: /);
    expect(errorOf({ adaptive: { tolerance: 0.5 } })).toMatch(/^SLUICE\.routes\[0\]\.adaptive\.tolerance: /);
    expect(errorOf({ adaptive: { burst: 3 } })).toMatch(/^SLUICE\.routes\[0\]\.adaptive: .*burst/);
    expect(errorOf({ adaptive: {}, limits: [{ name: "adaptive", rate: 1, period: "1s" }] })).toBe(
      'SLUICE.routes[0].limits[0].name: "adaptive" is the name of the route\'s adaptive limit: give this one another',
    );
  });

  it("leaves a route without adaptive as it was", () => {
    const r = loadConfig({ ORIGIN_URL, SLUICE: routeWith({}) });
    if (!r.ok) throw r.error;
    expect(r.config.routes[0]!.limits.map((l) => l.name)).toEqual(["per-ip"]);
    expect(r.config.routes[0]!.adaptive).toBeUndefined();
  });
});

describe("the latency histogram", () => {
  it("puts every latency in the bucket whose bound is at most 2^(1/4) above it", () => {
    fc.assert(
      fc.property(fc.double({ min: 1.0001, max: 1e7, noNaN: true }), (ms) => {
        const i = latencyBucket(ms);
        expect(bucketBound(i)).toBeGreaterThanOrEqual(ms * (1 - 1e-12));
        expect(bucketBound(i - 1)).toBeLessThan(ms);
        expect(bucketBound(i)).toBeLessThanOrEqual(ms * 2 ** 0.25 * (1 + 1e-12));
      }),
    );
  });

  it("keeps 1 ms or less in bucket 0 and the longest in the last; orders buckets like latencies", () => {
    expect([0, 0.5, 1, -3, Number.NaN].map(latencyBucket)).toEqual([0, 0, 0, 0, 0]);
    expect(latencyBucket(1e12)).toBe(LAST_BUCKET);
    fc.assert(
      fc.property(
        fc.double({ min: 0, max: 1e8, noNaN: true }),
        fc.double({ min: 0, max: 1e8, noNaN: true }),
        (a, b) => {
          if (a <= b) expect(latencyBucket(a)).toBeLessThanOrEqual(latencyBucket(b));
        },
      ),
    );
  });

  it("is sent as i:count pairs", () => {
    expect(
      serialiseHistogram(
        new Map([
          [27, 3],
          [0, 1],
        ]),
      ),
    ).toBe("27:3,0:1");
  });
});
