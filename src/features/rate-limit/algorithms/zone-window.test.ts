import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { compileLimits, loadLimits } from "../../../../test/support/limits.js";
import type { Limit } from "../../../config/index.js";
import { rateLimitHeaders } from "../headers.js";
import { retryAfterSeconds } from "../../../problem.js";
import { LocalBuckets } from "../isolate/local.js";
import { FixedWindow } from "./algorithms.js";
import { DAY_MS, dayStartMs, localMsAt, windowColumn, zoneWindow, zoneWindowAt } from "./zone-window.js";

/*
 * Windows of whole days starting at local midnight in a time zone (`align`): the boundary function
 * the script's caller and the isolate's models share, its DST behaviour, the configuration's checks,
 * and the RateLimit / Retry-After headers of a decision following local midnight.
 */

const at = (iso: string) => Date.parse(iso);
const HOUR = 3_600_000;

describe("the window of a day in a zone", () => {
  it("Asia/Shanghai (UTC+8, no DST): each day's window starts at 16:00 UTC", () => {
    const w = zoneWindowAt("Asia/Shanghai", DAY_MS, at("2026-11-24T15:59:59.999Z"));
    expect([w.startMs, w.endMs]).toEqual([at("2026-11-23T16:00:00Z"), at("2026-11-24T16:00:00Z")]);
    expect(zoneWindowAt("Asia/Shanghai", DAY_MS, at("2026-11-24T16:00:00Z")).startMs).toBe(at("2026-11-24T16:00:00Z"));
    // the offset the script floors with on its own clock: +8 h, the same window
    expect(w.offsetMs).toBe(8 * HOUR);
    expect(Math.floor((at("2026-11-24T12:00:00Z") + w.offsetMs) / DAY_MS)).toBe(w.index);
  });

  it("America/New_York, the March change: the day of it starts at local midnight (EST) and lasts 23 h", () => {
    const before = zoneWindowAt("America/New_York", DAY_MS, at("2026-03-08T04:59:59Z"));
    expect([before.startMs, before.endMs]).toEqual([at("2026-03-07T05:00:00Z"), at("2026-03-08T05:00:00Z")]);
    const change = zoneWindowAt("America/New_York", DAY_MS, at("2026-03-08T12:00:00Z"));
    expect([change.startMs, change.endMs]).toEqual([at("2026-03-08T05:00:00Z"), at("2026-03-09T04:00:00Z")]);
    expect(change.endMs - change.startMs).toBe(23 * HOUR);
    expect(change.index).toBe(before.index + 1);
    // the next day starts at midnight EDT
    const after = zoneWindowAt("America/New_York", DAY_MS, at("2026-03-09T04:00:00Z"));
    expect([after.startMs, after.endMs]).toEqual([at("2026-03-09T04:00:00Z"), at("2026-03-10T04:00:00Z")]);
  });

  it("America/New_York, the November change: that day's window lasts 25 h", () => {
    const w = zoneWindowAt("America/New_York", DAY_MS, at("2026-11-01T20:00:00Z"));
    expect([w.startMs, w.endMs]).toEqual([at("2026-11-01T04:00:00Z"), at("2026-11-02T05:00:00Z")]);
  });

  it("a zone that skips midnight starts that day where the gap ends (America/Santiago, 01:00)", () => {
    const start = dayStartMs("America/Santiago", at("2026-09-06T00:00:00Z") / DAY_MS);
    expect(localMsAt("America/Santiago", start)).toBe(at("2026-09-06T01:00:00Z"));
    expect(localMsAt("America/Santiago", start - 1000)).toBe(at("2026-09-05T23:59:59Z"));
  });

  it("windows of N days hold local dates k·N .. k·N + N − 1, from local midnight", () => {
    const w = zoneWindowAt("Asia/Shanghai", 7 * DAY_MS, at("2026-11-24T12:00:00Z"));
    expect(w.endMs - w.startMs).toBe(7 * DAY_MS);
    expect(localMsAt("Asia/Shanghai", w.startMs) % DAY_MS).toBe(0);
    expect((localMsAt("Asia/Shanghai", w.startMs) / DAY_MS) % 7).toBe(0);
  });

  it("property: the window holds the instant, starts on the first second of its first local date, and ends where the next starts", () => {
    const zones = [
      "Asia/Shanghai",
      "America/New_York",
      "Europe/London",
      "Australia/Lord_Howe",
      "Pacific/Kiritimati",
      "UTC",
    ];
    fc.assert(
      fc.property(
        fc.constantFrom(...zones),
        fc.constantFrom(1, 2, 7),
        fc.integer({ min: at("2000-01-01T00:00:00Z"), max: at("2040-01-01T00:00:00Z") }),
        (zone, days, now) => {
          const w = zoneWindowAt(zone, days * DAY_MS, now);
          expect(w.startMs).toBeLessThanOrEqual(now);
          expect(now).toBeLessThan(w.endMs);
          expect(Math.floor(localMsAt(zone, w.startMs) / DAY_MS)).toBe(w.index * days);
          expect(Math.floor(localMsAt(zone, w.startMs - 1000) / DAY_MS)).toBe(w.index * days - 1);
          expect(zoneWindowAt(zone, days * DAY_MS, w.endMs).startMs).toBe(w.endMs);
          // DST moves a boundary by at most an hour (Lord Howe: 30 min)
          expect(Math.abs(w.endMs - w.startMs - days * DAY_MS)).toBeLessThanOrEqual(HOUR);
          // the remembered window is the computed one
          expect(zoneWindow(zone, days * DAY_MS, now)).toEqual(w);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("decide.lua's column: the window and its offset, or nothing for windows on UTC", () => {
    const now = at("2026-11-24T12:00:00Z");
    expect(windowColumn("Asia/Shanghai", DAY_MS, now)).toBe(
      `${at("2026-11-23T16:00:00Z")}:${at("2026-11-24T16:00:00Z")}:${8 * HOUR}`,
    );
    expect(windowColumn(undefined, DAY_MS, now)).toBe("");
  });
});

describe("the fixed window model aligned to a zone", () => {
  it("resets at local midnight, and across the March change after 23 h", () => {
    const m = new FixedWindow({ rate: 2, periodUs: DAY_MS * 1000, burst: 2, align: "America/New_York" });
    const t = at("2026-03-08T06:00:00Z") * 1000;
    m.peek(t, 2).commit();
    const refused = m.peek(t + 1_000_000, 1);
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterMs).toBe(at("2026-03-09T04:00:00Z") - at("2026-03-08T06:00:01Z"));
    expect(m.peek(at("2026-03-09T03:59:59.999Z") * 1000, 1).allowed).toBe(false);
    expect(m.peek(at("2026-03-09T04:00:00Z") * 1000, 1).allowed).toBe(true);
  });
});

describe("align in the configuration", () => {
  const error = (def: Record<string, unknown>) => {
    const r = loadLimits([def]);
    return r.ok ? undefined : r.error.message;
  };

  it("loads on a fixed_window of whole days", () => {
    const [l] = compileLimits([{ algorithm: "fixed_window", rate: 100, period: "1d", align: "Asia/Shanghai" }]);
    expect(l?.align).toBe("Asia/Shanghai");
  });

  it("is refused, by field, on another algorithm, a period under a day or not of whole days, and an unknown zone", () => {
    expect(error({ algorithm: "sliding_window", rate: 1, period: "1d", align: "Asia/Shanghai" })).toMatch(
      /align.*fixed_window only/s,
    );
    expect(error({ algorithm: "fixed_window", rate: 1, period: "1h", align: "Asia/Shanghai" })).toMatch(
      /align.*whole days/s,
    );
    expect(error({ algorithm: "fixed_window", rate: 1, period: "36h", align: "Asia/Shanghai" })).toMatch(
      /align.*whole days/s,
    );
    expect(error({ algorithm: "fixed_window", rate: 1, period: "1d", align: "Mars/Olympus_Mons" })).toMatch(
      /align.*"Mars\/Olympus_Mons" is not a time zone/s,
    );
  });
});

describe("the headers of a decision on an aligned day", () => {
  it("RateLimit's reset and Retry-After count to local midnight in Beijing (16:00 UTC), not UTC midnight", () => {
    const [limit] = compileLimits([
      { name: "promos", algorithm: "fixed_window", rate: 1, period: "1d", align: "Asia/Shanghai" },
    ]) as [Limit];
    const buckets = [{ limit, key: "sluice:r:promos:c", params: { rate: 1, period: limit.period, burst: 1, cost: 1 } }];
    const local = new LocalBuckets();
    const now = at("2026-11-24T15:00:00Z"); // 23:00 in Beijing
    const first = local.decide(buckets, now);
    expect(rateLimitHeaders(first.outcomes).RateLimit).toBe('"promos";r=0;t=3600');
    const refused = local.decide(buckets, now + 1000);
    expect(refused.verdict).toBe("reject");
    const [o] = refused.outcomes;
    expect(retryAfterSeconds(o?.retryAfterMs ?? 0)).toBe(3599);
    expect(rateLimitHeaders(refused.outcomes).RateLimit).toBe('"promos";r=0;t=3599');
    expect(local.decide(buckets, at("2026-11-24T16:00:00Z")).verdict).toBe("allow");
  });
});
