import type { Redis } from "@upstash/redis";
import fc from "fast-check";
import { beforeAll, describe, expect, it, vi } from "vitest";
import type { Limit } from "../../src/config/index.js";
import { FixedWindow } from "../../src/features/rate-limit/algorithms/algorithms.js";
import { DAY_MS, zoneWindowAt } from "../../src/features/rate-limit/algorithms/zone-window.js";
import { scriptCall, type ScriptBucket } from "../../src/features/rate-limit/decision/decision.js";
import { compileLimits } from "../support/limits.js";
import { clockArgs, loadDecideWithTestClock } from "../support/test-clock.js";
import { fileRedis } from "./stack.js";

/*
 * fixed_window with `align`: decide.lua run by the test setup's real Redis with a test clock, its
 * `window` column built as production builds it (scriptCall, by the isolate's clock, which the test
 * sets apart from Redis's to play clock skew). Windows must end at local midnight, the reference
 * model (the isolate's local buckets) must agree with the script across a DST change, and a lease
 * must end before the local day does.
 */

const db = fileRedis();
let redis: Redis;
let sha: string;
beforeAll(async () => {
  redis = db.redis;
  sha = await loadDecideWithTestClock(redis);
});

const at = (iso: string) => Date.parse(iso);
let run = 0;
const freshKey = () => `tz:${++run}`;

const dayLimit = (rate: number, align?: string): Limit =>
  compileLimits([{ algorithm: "fixed_window", rate, period: "1d", ...(align ? { align } : {}) }])[0] as Limit;

interface Call {
  key: string;
  /** Redis's clock (ms). */
  redisMs: number;
  /** The isolate's clock (ms), which the window column is computed by; Redis's by default. */
  isolateMs?: number;
  cost?: number;
  ask?: number;
  /** The client's own override as the caller knows it: "rate:burst:period_ms:until_ms". */
  own?: string;
}

/** One take; the reply: admitted, then allowed, remaining, retry_after_ms, reset_ms, delay_ms, leased, lease_ms, lease_epoch. */
async function take(l: Limit, c: Call): Promise<number[]> {
  const bucket: ScriptBucket = {
    limit: l,
    key: c.key,
    params: { rate: l.rate, period: l.period, burst: l.burst, cost: c.cost ?? 1 },
    ...(c.ask ? { lease: { ask: c.ask } } : {}),
    ...(c.own ? { override: { own: c.own } } : {}),
  };
  vi.useFakeTimers({ toFake: ["Date"], now: c.isolateMs ?? c.redisMs });
  const call = scriptCall([bucket], "take");
  vi.useRealTimers();
  const reply = (await redis.evalsha(sha, call.keys, [...call.args, ...clockArgs(c.redisMs * 1000)])) as number[];
  return reply.slice(0, 9);
}

describe("decide.lua, fixed_window aligned to a time zone", () => {
  it("Asia/Shanghai: the day ends at 16:00 UTC (local midnight), where a window on UTC runs 8 h more", async () => {
    const key = freshKey();
    const l = dayLimit(2, "Asia/Shanghai");
    const t = at("2026-11-24T15:59:58Z");
    expect((await take(l, { key, redisMs: t, cost: 2 })).slice(0, 5)).toEqual([1, 1, 0, 0, 2000]);
    expect((await take(l, { key, redisMs: t + 500 })).slice(0, 5)).toEqual([0, 0, 0, 1500, 1500]);
    expect((await take(l, { key, redisMs: at("2026-11-24T16:00:00Z") })).slice(0, 5)).toEqual([1, 1, 1, 0, 86_400_000]);
    const utc = await take(dayLimit(2), { key: freshKey(), redisMs: t });
    expect(utc[4]).toBe(8 * 3_600_000 + 2000);
  });

  it("America/New_York on the day of the March change: the window ends at the next local midnight, 23 h after its start", async () => {
    const key = freshKey();
    const l = dayLimit(1, "America/New_York");
    const reply = await take(l, { key, redisMs: at("2026-03-08T12:00:00Z") });
    expect(reply[4]).toBe(at("2026-03-09T04:00:00Z") - at("2026-03-08T12:00:00Z"));
    expect((await take(l, { key, redisMs: at("2026-03-09T03:59:59.999Z") }))[0]).toBe(0);
    expect((await take(l, { key, redisMs: at("2026-03-09T04:00:00Z") }))[0]).toBe(1);
  });

  it("an isolate clock on the other side of a boundary: Redis's clock decides, by the offset it was given", async () => {
    const key = freshKey();
    const l = dayLimit(2, "Asia/Shanghai");
    // the isolate still in the 23rd (Beijing), Redis already in the 24th: a fresh window
    const first = await take(l, { key, redisMs: at("2026-11-24T16:00:01Z"), isolateMs: at("2026-11-24T15:59:59Z") });
    expect(first.slice(0, 5)).toEqual([1, 1, 1, 0, 86_399_000]);
    // and the same window as an isolate in step with Redis computes
    const second = await take(l, { key, redisMs: at("2026-11-24T16:00:02Z") });
    expect(second.slice(0, 5)).toEqual([1, 1, 0, 0, 86_398_000]);
    // the isolate ahead, Redis still in the old day: the old day's window, ending at 16:00 UTC
    const other = freshKey();
    const ahead = await take(l, {
      key: other,
      redisMs: at("2026-11-24T15:59:59Z"),
      isolateMs: at("2026-11-24T16:00:01Z"),
    });
    expect(ahead[4]).toBe(1000);
  });

  it("an override's period: windows of that period floored on Redis's clock shifted by the zone's offset", async () => {
    const l = dayLimit(1, "Asia/Shanghai");
    const now = at("2026-11-23T15:30:00Z");
    // two days, until far ahead: in a zone without DST, windows of two local days from local midnight
    const own = `1:1:${2 * DAY_MS}:${at("2030-01-01T00:00:00Z")}`;
    const reply = await take(l, { key: freshKey(), redisMs: now, own });
    expect(reply[1]).toBe(1);
    expect(reply[4]).toBe(zoneWindowAt("Asia/Shanghai", 2 * DAY_MS, now).endMs - now);
    // the first of two local days: not the configured day's end, 30 min away
    expect(reply[4]).toBe(at("2026-11-24T16:00:00Z") - now);
  });

  it("a lease ends before the local day does", async () => {
    const l = dayLimit(100, "Asia/Shanghai");
    const reply = await take(l, { key: freshKey(), redisMs: at("2026-11-24T15:59:59Z"), ask: 10 });
    const [, , , , , , leased, leaseMs] = reply;
    expect(leased).toBe(10);
    // 1000 ms to the window's end less the script's 250 ms of grace
    expect(leaseMs).toBe(750);
  });

  it("property: the isolate's model and the script agree around New York's March change", async () => {
    const start = at("2026-03-08T00:00:00Z");
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 3 * 3_600_000 }), fc.integer({ min: 1, max: 3 })), {
          minLength: 1,
          maxLength: 12,
        }),
        fc.integer({ min: 0, max: 36 }),
        async (steps, hourFrom) => {
          const l = dayLimit(4, "America/New_York");
          const model = new FixedWindow({ rate: 4, periodUs: l.period * 1000, burst: 4, align: "America/New_York" });
          const key = freshKey();
          let ms = start + hourFrom * 3_600_000;
          for (const [gap, cost] of steps) {
            ms += gap;
            const expected = model.peek(ms * 1000, cost);
            const reply = await take(l, { key, redisMs: ms, cost });
            const state = expected.allowed ? expected.after : expected.before;
            expect(reply.slice(1, 5)).toEqual([
              expected.allowed ? 1 : 0,
              state.remaining,
              expected.retryAfterMs,
              state.resetMs,
            ]);
            expected.commit();
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});
