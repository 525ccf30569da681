import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { splitShares } from "../../src/region/shares.js";
import { simulateSplit } from "@sluice/dev";

const INCIDENT = { rate: 400, burst: 40, demand: { us: 240, eu: 120, ap: 30, sa: 10 }, seconds: 60 };
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

describe("splitShares", () => {
  it("never hands out more than the global rate and burst, whatever the demand", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 100_000 }),
        fc.integer({ min: 1, max: 100_000 }),
        fc.array(fc.nat({ max: 1_000_000 }), { minLength: 1, maxLength: 8 }),
        (rate, burst, demands) => {
          const regions = demands.map((_, i) => `r${i}`);
          const shares = splitShares({
            rate,
            burst,
            regions,
            demand: Object.fromEntries(regions.map((r, i) => [r, demands[i] as number])),
          });
          const rates = regions.map((r) => shares[r]!.rate);
          const bursts = regions.map((r) => shares[r]!.burst);
          expect(rates.reduce((a, b) => a + b)).toBeLessThanOrEqual(rate);
          expect(bursts.reduce((a, b) => a + b)).toBeLessThanOrEqual(burst);
          expect([...rates, ...bursts].every((x) => Number.isInteger(x) && x >= 0)).toBe(true);
          // enough to go round: every region keeps at least one token of rate and burst
          if (rate >= regions.length) expect(Math.min(...rates)).toBeGreaterThanOrEqual(1);
          if (burst >= regions.length) expect(Math.min(...bursts)).toBeGreaterThanOrEqual(1);
        },
      ),
    );
  });

  it("follows demand, keeps a floor for an idle region, and leaves frozen regions as they are", () => {
    const s = splitShares({ rate: 400, burst: 40, regions: ["a", "b", "c"], demand: { a: 300, b: 100, c: 0 } });
    expect(s.a!.rate).toBeGreaterThan(s.b!.rate * 2.5);
    expect(s.c!.rate).toBe(8); // 2% floor
    const f = splitShares({
      rate: 400,
      burst: 40,
      regions: ["a", "b", "c"],
      demand: { a: 0, b: 0, c: 1000 },
      frozen: { a: { rate: 50, burst: 5 } },
    });
    expect(f.a).toEqual({ rate: 50, burst: 5 });
    expect(f.b!.rate + f.c!.rate).toBe(350);
  });
});

describe("the four-region incident: 400/s in all, demand 240, 120, 30, 10", () => {
  it("a static equal split admits only about 240/s", () => {
    const r = simulateSplit({ ...INCIDENT, rebalanceMs: 0 });
    expect(mean(r.perSecond.slice(1))).toBeGreaterThan(235);
    expect(mean(r.perSecond.slice(1))).toBeLessThan(245);
  });

  it("sluice's split admits at least 95% of 400/s and never more than 400 + one burst in any second", () => {
    const r = simulateSplit({ ...INCIDENT, rebalanceMs: 1_000 });
    const settled = r.perSecond.slice(2);
    expect(mean(settled)).toBeGreaterThanOrEqual(380);
    expect(Math.min(...settled)).toBeGreaterThanOrEqual(380);
    expect(r.worstSecond).toBeLessThanOrEqual(400 + 40);
  });

  it("a region cut off from the rebalancer keeps its last share, never grows it, and the world stays within the limit", () => {
    const r = simulateSplit({ ...INCIDENT, rebalanceMs: 1_000, cutOff: { region: "sa", fromSecond: 20, demand: 300 } });
    const before = r.cutOffShares[18]!;
    for (const s of r.cutOffShares.slice(20)) expect(s).toEqual(before);
    expect(r.worstSecond).toBeLessThanOrEqual(400 + 40);
    // the cut-off region's surge (300/s) is held to its old share: 10/s before, its rate after, plus one burst
    expect(r.admittedByRegion.sa!).toBeLessThanOrEqual(20 * 10 + 40 * before.rate + before.burst);
    expect(before.rate).toBeLessThan(30);
  });
});
