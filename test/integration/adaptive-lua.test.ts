import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import { bucketBound, latencyBucket } from "../../src/metrics/histogram.js";
import { asHash } from "../../src/store/replies.js";
import { fileRedis } from "./stack.js";

/*
 * lua/adaptive.lua on a test clock (its one TIME call reads two trailing ARGV entries): the limit
 * of a route's origin moves, window by window, exactly as the script's header and docs/algorithms.md say.
 */

const CLOCK = "redis.call('TIME')";
const db = fileRedis();
let sha: string;
beforeAll(async () => {
  const source = readFileSync("lua/adaptive.lua", "utf8");
  expect(source.split(CLOCK).length - 1).toBe(1); // the clock is read in one place
  sha = await db.redis.scriptLoad(source.replace(CLOCK, "{ ARGV[#ARGV - 1], ARGV[#ARGV] }"));
});

interface Settings {
  initial: number;
  min: number;
  max: number;
  interval: number;
  lease: number;
  target: number;
  quantile: number;
  tolerance: number;
}
const BASE: Settings = {
  initial: 16,
  min: 1,
  max: 100,
  interval: 1000,
  lease: 30_000,
  target: 0,
  quantile: 900,
  tolerance: 1500,
};

let run = 0;
/** One route's adaptive state in Redis, reported into on a test clock (ms). */
function route(settings: Partial<Settings> = {}) {
  run++;
  const keys = [`adaptive-lua:${run}:state`, `adaptive-lua:${run}:overrides`];
  const s = { ...BASE, ...settings };
  const argv = [s.initial, s.min, s.max, s.interval, s.lease, s.target, s.quantile, s.tolerance].join(":");
  /** A report of `n` responses all at `latencyMs` (`errors` of them failed), at `t` ms. */
  const report = async (t: number, n: number, latencyMs: number, peak: number, errors = 0) => {
    const ok = n - errors;
    const hist = ok > 0 ? `${latencyBucket(latencyMs)}:${ok}` : "";
    const clock = [String(Math.floor(t / 1000)), String((t % 1000) * 1000)];
    const reply = (await db.redis.evalsha(sha, keys, [
      "adaptive:h",
      argv,
      `${n}:${errors}:${peak}`,
      hist,
      ...clock,
    ])) as number[];
    const [limit, short, base, closed] = reply.map(Number) as [number, number, number, number];
    return { limit, shortMs: short / 10, baseMs: base / 10, closed: closed === 1 };
  };
  /** The state hash, every value as text. */
  const state = async () => {
    const hash = asHash(await db.redis.hgetall(keys[0] as string));
    return Object.fromEntries(Object.entries(hash).map(([k, v]) => [k, String(v)]));
  };
  const override = async () => String(await db.redis.hget(keys[1] as string, "adaptive:h"));
  return { report, state, override };
}

const T0 = 1_800_000_000_000;
/** What a window at `ms` reports as its percentile: the upper bound of its histogram bucket. */
const short = (ms: number) => Math.floor(bucketBound(latencyBucket(ms)) * 10) / 10;

describe("adaptive.lua: the limit of a route's origin, window by window", () => {
  it("starts at `initial`, written as the adaptive bucket's override; a window closes only when interval old with 10 responses", async () => {
    const r = route({ target: 100 });
    expect(await r.report(T0, 5, 50, 10)).toEqual({ limit: 16, shortMs: -0.1, baseMs: 0, closed: false });
    expect(await r.override()).toBe(`16:16:30000:${T0 + 600_000}`);
    // interval old, but 9 responses: the window goes on
    expect((await r.report(T0 + 1_000, 4, 50, 10)).closed).toBe(false);
    const closing = await r.report(T0 + 1_100, 1, 50, 10);
    expect(closing.closed).toBe(true);
    expect(closing.shortMs).toBe(short(50));
    // under target, no errors, the limit used at least half: + 0.5 × sqrt(16) = 18
    expect(closing.limit).toBe(18);
    expect(await r.override()).toBe(`18:18:30000:${T0 + 1_100 + 600_000}`);
  });

  it("with a target: above it, shrinks at once to limit × target / latency (at most halving); an idle window does not climb", async () => {
    const r = route({ target: 100, initial: 40 });
    await r.report(T0, 20, 80, 5); // under target, but 5 in flight of 40: no evidence for more
    expect((await r.report(T0 + 1_000, 1, 80, 5)).limit).toBe(40);
    await r.report(T0 + 1_000, 20, 150, 40);
    const shrunk = await r.report(T0 + 2_000, 1, 150, 40);
    expect(shrunk.limit).toBe(Math.floor(40 * (100 / short(150))));
    await r.report(T0 + 2_000, 20, 900, 40);
    expect((await r.report(T0 + 3_000, 1, 900, 40)).limit).toBe(Math.floor((40 * 100) / short(150) / 2));
  });

  it("errors in 5% or more of a window's responses shrink it by their share (at most halving), whatever the latency", async () => {
    const r = route({ target: 1_000, initial: 50 });
    await r.report(T0, 100, 10, 50, 20);
    const after = await r.report(T0 + 1_000, 0, 10, 50);
    expect(after.limit).toBe(40); // 50 × (1 − 0.2)
    await r.report(T0 + 1_000, 10, 10, 50, 10);
    expect((await r.report(T0 + 2_000, 0, 10, 50)).limit).toBe(20); // every response failed: halved
  });

  it("stays within min and max", async () => {
    const r = route({ target: 100, initial: 3, min: 2, max: 4 });
    for (let w = 0; w < 4; w++) await r.report(T0 + w * 1_000, 20, 10, 4);
    expect((await r.report(T0 + 4_000, 1, 10, 4)).limit).toBe(4);
    for (let w = 5; w < 9; w++) await r.report(T0 + w * 1_000, 20, 5_000, 4);
    expect((await r.report(T0 + 9_000, 1, 5_000, 4)).limit).toBe(2);
  });

  it("without a target: learns the lowest latency as base, aims at tolerance × base, and every 8 windows probes two windows at half the limit, learning from the second (at most doubling)", async () => {
    const r = route({ initial: 20 });
    /** One window from `t`: its responses, then the report at `t` + interval that closes it. */
    const window = async (t: number, ms: number, peak: number) => {
      await r.report(t, 20, ms, peak);
      return r.report(t + 1_000, 0, ms, peak);
    };
    // window 1 at 100 ms: base 100 (bucket bound), at the reference: climbs
    const w1 = await window(T0, 100, 20);
    expect(w1.baseMs).toBe(short(100));
    expect(w1.limit).toBe(Math.floor(20 + 0.5 * Math.sqrt(20)));
    // window 2 at 300 ms: above 1.5 × base, shrinks by ref / short
    const w2 = await window(T0 + 1_000, 300, 20);
    const limit2 = (20 + 0.5 * Math.sqrt(20)) * ((1.5 * short(100)) / short(300));
    expect(w2.limit).toBe(Math.floor(limit2));
    expect(w2.baseMs).toBe(short(100));
    for (let w = 3; w <= 7; w++) expect((await window(T0 + (w - 1) * 1_000, 140, 20)).closed).toBe(true);
    expect((await r.state()).probe).toBe("0");
    const w8 = await window(T0 + 7_000, 140, 20);
    // the eighth window closed: the next one is a probe, at half the limit
    expect((await r.state()).probe).toBe("1");
    const before = Number((await r.state()).limit);
    expect(w8.limit).toBe(Math.max(1, Math.floor(before / 2)));
    // the probe's first window lets requests admitted under the full limit finish: it measures nothing
    const settling = await window(T0 + 8_000, 500, 10);
    expect((await r.state()).probe).toBe("2");
    expect(settling.limit).toBe(w8.limit);
    expect(settling.baseMs).toBe(short(100));
    // its second sees 250 ms (the origin became slower for good): base follows it, at most
    // doubling per probe, and the limit is restored
    const probed = await window(T0 + 9_000, 250, 10);
    expect(probed.baseMs).toBe(Math.min(short(250), 2 * short(100)));
    expect(probed.baseMs).toBeLessThan(short(250));
    expect(probed.limit).toBe(Math.floor(before));
    expect((await r.state()).probe).toBe("0");
  });

  it("starts a new window when the last one is more than 10 intervals old (its reports describe another time)", async () => {
    const r = route({ target: 100, initial: 10 });
    await r.report(T0, 9, 5_000, 10);
    // 9 slow responses long ago, then 10 fast ones: only the fast ones count
    await r.report(T0 + 11_000, 10, 50, 10);
    const next = await r.report(T0 + 12_100, 0, 50, 10);
    expect(next.closed).toBe(true);
    expect(next.shortMs).toBe(short(50));
    expect(next.limit).toBe(Math.floor(10 + 0.5 * Math.sqrt(10)));
  });
});
