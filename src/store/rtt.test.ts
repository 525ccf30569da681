import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../config/index.js";
import { decisionBudget } from "../region/index.js";
import { RttEstimator, type BudgetBounds } from "./rtt.js";

const BOUNDS: BudgetBounds = { floorMs: 50, ceilingMs: 1_000 };

/** A history of what a store did: replies of some ms, and calls that ran out of their budget. */
const eventArb = fc.oneof(
  fc.record({ reply: fc.integer({ min: 0, max: 5_000 }) }),
  fc.record({ timeout: fc.constant(true) }),
);
const boundsArb = fc
  .tuple(fc.integer({ min: 1, max: 10_000 }), fc.integer({ min: 1, max: 10_000 }))
  .map(([a, b]): BudgetBounds => ({ floorMs: Math.min(a, b), ceilingMs: Math.max(a, b) }));

function play(e: RttEstimator, events: Array<{ reply: number } | { timeout: true }>, bounds: BudgetBounds): void {
  for (const event of events) {
    if ("reply" in event) e.sample(event.reply);
    else e.timedOut(e.budget(bounds));
  }
}

describe("RttEstimator", () => {
  it("gives a cold isolate the ceiling: it must not time out on a far store while it learns", () => {
    const e = new RttEstimator();
    expect(e.budget(BOUNDS)).toBe(1_000);
    expect(e.smoothed).toBeUndefined();
    e.timedOut(1_000); // still no reply: still the ceiling
    expect(e.budget(BOUNDS)).toBe(1_000);
  });

  it("follows RFC 6298: SRTT = R, RTTVAR = R/2 at first, then gains 1/8 and 1/4", () => {
    const e = new RttEstimator();
    e.sample(80);
    expect(e.smoothed).toEqual({ srttMs: 80, rttvarMs: 40 });
    e.sample(96);
    expect(e.smoothed).toEqual({ srttMs: 82, rttvarMs: 34 }); // 3/4·40 + 1/4·16, 7/8·80 + 1/8·96
    // budget: SRTT + 4·RTTVAR + max(10, SRTT/4) = 82 + 136 + 20.5
    expect(e.budget(BOUNDS)).toBe(239);
  });

  it("settles a steady far store just above its round trip, and a store next door on the floor", () => {
    const far = new RttEstimator();
    for (let i = 0; i < 60; i++) far.sample(80);
    expect(far.budget(BOUNDS)).toBeGreaterThan(80);
    expect(far.budget(BOUNDS)).toBeLessThanOrEqual(101); // 80 + 20 margin + what is left of RTTVAR
    const near = new RttEstimator();
    for (let i = 0; i < 60; i++) near.sample(2);
    expect(near.budget(BOUNDS)).toBe(50);
  });

  it("backs off after a timeout (twice the budget that ran out) and drops it at the next reply", () => {
    const e = new RttEstimator();
    for (let i = 0; i < 60; i++) e.sample(2);
    expect(e.budget(BOUNDS)).toBe(50);
    e.timedOut(50);
    expect(e.budget(BOUNDS)).toBe(100);
    e.timedOut(100);
    e.timedOut(100); // calls that were in flight together back off once, not once each
    expect(e.budget(BOUNDS)).toBe(200);
    e.timedOut(800);
    expect(e.budget(BOUNDS)).toBe(1_000);
    e.sample(3);
    expect(e.budget(BOUNDS)).toBe(50);
  });

  it("property: whatever happened, the budget stays within the operator's bounds", () => {
    fc.assert(
      fc.property(fc.array(eventArb, { maxLength: 60 }), boundsArb, (events, bounds) => {
        const e = new RttEstimator();
        play(e, events, bounds);
        const b = e.budget(bounds);
        return Number.isInteger(b) && b >= bounds.floorMs && b <= bounds.ceilingMs;
      }),
    );
  });

  it("property: right after a reply of R ms, the budget is never below R (within the ceiling)", () => {
    fc.assert(
      fc.property(fc.array(eventArb, { maxLength: 60 }), fc.integer({ min: 0, max: 5_000 }), (events, r) => {
        const e = new RttEstimator();
        play(e, events, BOUNDS);
        e.sample(r);
        return e.budget(BOUNDS) >= Math.min(r, BOUNDS.ceilingMs);
      }),
    );
  });

  it("property: a timeout never shrinks the budget, and the next one is at least twice the one that ran out", () => {
    fc.assert(
      fc.property(fc.array(eventArb, { minLength: 1, maxLength: 60 }), (events) => {
        const e = new RttEstimator();
        play(e, events, BOUNDS);
        const before = e.budget(BOUNDS);
        e.timedOut(before);
        const after = e.budget(BOUNDS);
        return after >= before && after >= Math.min(2 * before, BOUNDS.ceilingMs);
      }),
    );
  });
});

describe("decisionBudget: the bounds from the configuration", () => {
  const bounds = (sluice: Record<string, unknown>) => {
    const r = loadConfig({ ORIGIN_URL: "https://o.example", SLUICE: sluice });
    return r.ok ? decisionBudget(r.config) : r.error.message;
  };

  it("timeout_ms is the floor, max_timeout_ms the ceiling: by default 50 ms and 1 s", () => {
    expect(bounds({})).toEqual({ floorMs: 50, ceilingMs: 1_000 });
    expect(bounds({ timeout_ms: 20, max_timeout_ms: 400 })).toEqual({ floorMs: 20, ceilingMs: 400 });
    expect(bounds({ timeout_ms: 100, max_timeout_ms: 100 })).toEqual({ floorMs: 100, ceilingMs: 100 }); // a fixed budget
  });

  it("a timeout_ms above a second, without max_timeout_ms, is its own ceiling (older configurations still load)", () => {
    expect(bounds({ timeout_ms: 5_000 })).toEqual({ floorMs: 5_000, ceilingMs: 5_000 });
  });

  it("refuses a ceiling below the floor, naming the field; accepts global_timeout_ms and ignores it", () => {
    expect(bounds({ timeout_ms: 200, max_timeout_ms: 100 })).toMatch(
      /^SLUICE\.max_timeout_ms: must be at least timeout_ms \(200\)/,
    );
    expect(bounds({ global_timeout_ms: 300 })).toEqual({ floorMs: 50, ceilingMs: 1_000 });
  });
});
