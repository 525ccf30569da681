import { readFileSync } from "node:fs";
import type { Redis } from "@upstash/redis";
import { beforeAll, describe, expect, it } from "vitest";
import type { Limit } from "../../src/config/index.js";
import { scriptCall, type ScriptMode } from "../../src/features/rate-limit/decision/decision.js";
import { compileLimits } from "../support/limits.js";
import { clockArgs, withTestClock } from "../support/test-clock.js";
import { fileRedis } from "./stack.js";

/*
 * What the sliding log does beyond the reply figures algorithms-lua.test.ts checks against the
 * model: what its key holds (one member per admitted request whatever its cost, and the running
 * sum of their costs; the request's own removed by a refund, never more than `rate`), its TTL on
 * the real clock, a key another algorithm left behind, a log written one member per unit (before
 * the sum was kept), the entry id it needs, and a peek under the no-writes flag. On the file's
 * own Redis.
 */

const SOURCE = readFileSync("lua/decide.lua", "utf8");
const db = fileRedis();
let redis: Redis;
let sha: string;
let peekSha: string;
let realSha: string;
beforeAll(async () => {
  redis = db.redis;
  sha = await redis.scriptLoad(withTestClock(SOURCE));
  // as DECIDE_PEEK_SCRIPT is made: Redis then refuses any write the script attempts
  peekSha = await redis.scriptLoad(withTestClock(SOURCE).replace(/^#!lua flags=/, "#!lua flags=no-writes,"));
  realSha = await redis.scriptLoad(SOURCE);
});

const T0 = 1_700_000_000_000_000;
const MS = 1000;
let run = 0;
const freshKey = () => `slog:${++run}`;

const logLimit = (rate: number, period = "1s", margin?: string): Limit =>
  compileLimits([{ algorithm: "sliding_log", rate, period, ...(margin ? { margin } : {}) }])[0] as Limit;

interface Call {
  key: string;
  t: number;
  cost?: number;
  entry?: string;
  mode?: ScriptMode;
}

/** KEYS and ARGV as production builds them, plus the test clock's two (none for the real clock). */
function argsOf(l: Limit, c: Call, clock = true) {
  const bucket = {
    limit: l,
    key: c.key,
    params: { rate: l.rate, period: l.period, burst: l.burst, cost: c.cost ?? 1 },
    ...(c.entry === undefined ? {} : { entry: c.entry }),
  };
  const call = scriptCall([bucket], c.mode ?? "take");
  return { keys: call.keys, args: clock ? [...call.args, ...clockArgs(c.t)] : call.args };
}

const decide = async (l: Limit, c: Call, script = sha): Promise<number[]> => {
  const { keys, args } = argsOf(l, c);
  return (await redis.evalsha(script, keys, args)) as number[];
};

/** The log's request members, oldest first (the running sum left out). */
const members = async (key: string) => ((await redis.zrange(key, 0, -1)) as string[]).filter((m) => m !== "#sum");
/** The running sum of the members' costs the log keeps beside them (its score is minus the sum), null without one. */
const sumOf = async (key: string) => {
  const score = await redis.zscore(key, "#sum");
  return score === null ? null : -Number(score);
};

describe("the sliding log's key", () => {
  it("holds one member per admitted request carrying its cost, and their sum; a refund removes the request's own, not the newest", async () => {
    const l = logLimit(4);
    const key = freshKey();
    expect((await decide(l, { key, t: T0, cost: 2, entry: "a" }))[0]).toBe(1);
    expect((await decide(l, { key, t: T0 + 500 * MS, cost: 1, entry: "b" }))[0]).toBe(1);
    expect(await members(key)).toEqual(["a*2", "b*1"]);
    expect(await sumOf(key)).toBe(3);
    // refused: nothing added
    expect((await decide(l, { key, t: T0 + 600 * MS, cost: 2, entry: "c" })).slice(0, 4)).toEqual([0, 0, 1, 400]);
    expect(await members(key)).toEqual(["a*2", "b*1"]);
    // a's refund leaves b, which still counts until 1.5 s
    const refund = await decide(l, { key, t: T0 + 700 * MS, cost: 2, entry: "a", mode: "refund" });
    expect(refund.slice(0, 3)).toEqual([1, 1, 3]);
    expect(await members(key)).toEqual(["b*1"]);
    expect(await sumOf(key)).toBe(1);
    const later = await decide(l, { key, t: T0 + 1_100 * MS, cost: 3, entry: "d" });
    expect(later.slice(0, 3)).toEqual([1, 1, 0]);
    // a refund of an entry no longer in the log changes nothing
    await decide(l, { key, t: T0 + 1_200 * MS, cost: 2, entry: "a", mode: "refund" });
    expect(await members(key)).toEqual(["b*1", "d*3"]);
    expect(await sumOf(key)).toBe(4);
    // b leaves at 1.5 s: the next write trims it and takes its cost off the sum
    expect((await decide(l, { key, t: T0 + 1_600 * MS, cost: 1, entry: "e" })).slice(0, 3)).toEqual([1, 1, 0]);
    expect(await members(key)).toEqual(["d*3", "e*1"]);
    expect(await sumOf(key)).toBe(4);
  });

  it("never keeps more than `rate` members, its sum is the cost in the period, and no sliding period admits more than `rate` units", async () => {
    const rate = 100;
    const l = logLimit(rate);
    const key = freshKey();
    const admitted: Array<[number, number]> = [];
    let most = 0;
    let mostMembers = 0;
    // a greedy client, one request a ms for 3 s, costs 1 to 3
    for (let from = 0; from < 3000; from += 500) {
      const p = redis.pipeline();
      const calls = Array.from({ length: 500 }, (_, i) => ({ t: T0 + (from + i) * MS, cost: 1 + ((from + i) % 3) }));
      for (const c of calls) {
        const { keys, args } = argsOf(l, { key, ...c, entry: `e${c.t}` });
        p.evalsha(sha, keys, args);
        p.zcard(key);
        p.zscore(key, "#sum");
      }
      const replies = (await p.exec()) as Array<number[] | number>;
      calls.forEach((c, i) => {
        if ((replies[3 * i] as number[])[0] === 1) admitted.push([c.t, c.cost]);
        mostMembers = Math.max(mostMembers, (replies[3 * i + 1] as number) - 1);
        // the sum may still hold members that left the period since the last write: at most `rate` after a write
        most = Math.max(most, -(replies[3 * i + 2] as number));
      });
    }
    // one member per request: about half as many as the units, for costs 1 to 3
    expect(mostMembers).toBeLessThanOrEqual(rate / 2 + 2);
    expect(most).toBeLessThanOrEqual(rate);
    expect(most).toBeGreaterThan(rate - 3);
    let worst = 0;
    for (const [start] of admitted) {
      const inSecond = admitted.filter(([t]) => t >= start && t < start + 1_000 * MS);
      worst = Math.max(
        worst,
        inSecond.reduce((sum, [, cost]) => sum + cost, 0),
      );
    }
    // exact: full, and never past it (the two-counter sliding_window lets 189 through here)
    expect(worst).toBeLessThanOrEqual(rate);
    expect(worst).toBeGreaterThan(rate - 3);
  });

  it("keeps a request of any cost as one member: 1,100 units, one member and the sum; its refund removes it", async () => {
    const l = logLimit(1_200);
    const key = freshKey();
    expect((await decide(l, { key, t: T0, cost: 1_100, entry: "big" })).slice(0, 3)).toEqual([1, 1, 100]);
    expect(await redis.zcard(key)).toBe(2);
    expect(await sumOf(key)).toBe(1_100);
    expect((await decide(l, { key, t: T0 + MS, cost: 101, entry: "x" })).slice(0, 4)).toEqual([0, 0, 100, 999]);
    await decide(l, { key, t: T0 + 2 * MS, cost: 1_100, entry: "big", mode: "refund" });
    // empty again: the key is gone, as a fresh limit's
    expect(await redis.exists(key)).toBe(0);
  });

  it("expires with its newest member on the real clock", async () => {
    const l = logLimit(5, "10s");
    const key = freshKey();
    const { keys, args } = argsOf(l, { key, t: 0, entry: "r" }, false);
    expect(((await redis.evalsha(realSha, keys, args)) as number[]).slice(0, 5)).toEqual([1, 1, 4, 0, 10_000]);
    const ttl = await redis.pttl(key);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(10_000);
  });

  it("with a margin, counts each unit for period + margin: retry-after, reset and TTL include it", async () => {
    const l = logLimit(2, "1s", "200ms");
    const key = freshKey();
    expect((await decide(l, { key, t: T0, cost: 2, entry: "m" })).slice(0, 5)).toEqual([1, 1, 0, 0, 1_200]);
    // a plain log would have room again at 1 s: this one waits out the margin too
    expect((await decide(l, { key, t: T0 + 1_000 * MS, entry: "n" })).slice(0, 4)).toEqual([0, 0, 0, 200]);
    expect((await decide(l, { key, t: T0 + 1_199 * MS, entry: "n" })).slice(0, 4)).toEqual([0, 0, 0, 1]);
    expect((await decide(l, { key, t: T0 + 1_200 * MS, entry: "n" })).slice(0, 3)).toEqual([1, 1, 1]);
    expect(await members(key)).toEqual(["n*1"]);
    // on the real clock the key outlives the period by the margin
    const real = freshKey();
    const { keys, args } = argsOf(l, { key: real, t: 0, entry: "r" }, false);
    await redis.evalsha(realSha, keys, args);
    expect(await redis.pttl(real)).toBeGreaterThan(1_000);
  });

  it("reads another algorithm's value at its key as an empty log, and replaces it on the first take", async () => {
    const l = logLimit(3);
    const key = freshKey();
    await redis.set(key, "s:2:3:1700000000");
    const peek = await decide(l, { key, t: T0, cost: 3, mode: "peek" }, peekSha);
    expect(peek.slice(0, 3)).toEqual([1, 1, 3]);
    expect(await redis.get(key)).toBe("s:2:3:1700000000");
    expect((await decide(l, { key, t: T0, cost: 2, entry: "n" })).slice(0, 3)).toEqual([1, 1, 1]);
    expect(await members(key)).toEqual(["n*2"]);
    expect(await sumOf(key)).toBe(2);
  });

  it("needs the request's entry id to take or refund; a peek needs none and writes nothing under no-writes", async () => {
    const l = logLimit(2);
    const key = freshKey();
    await expect(decide(l, { key, t: T0 })).rejects.toThrow(/limit 1 \(sliding_log\) needs an entry id/);
    await expect(decide(l, { key, t: T0, entry: "bad id" })).rejects.toThrow(/sliding_log/);
    await decide(l, { key, t: T0, cost: 2, entry: "p" });
    const peek = await decide(l, { key, t: T0 + 300 * MS, mode: "peek" }, peekSha);
    // refused until the two units taken at T0 leave, at 1 s; reset then too
    expect(peek.slice(0, 5)).toEqual([0, 0, 0, 700, 700]);
    expect(await members(key)).toEqual(["p*2"]);
  });

  it("reads a log written one member per unit (no sum) as those units, and keeps the sum from its next write", async () => {
    const l = logLimit(5);
    const key = freshKey();
    // as the script wrote it before the sum was kept: "{entry}:{j}" per unit
    await redis.zadd(
      key,
      { score: T0, member: "old:1" },
      { score: T0, member: "old:2" },
      { score: T0 + 100 * MS, member: "old2:1" },
    );
    const peek = await decide(l, { key, t: T0 + 200 * MS, cost: 3, mode: "peek" }, peekSha);
    expect(peek.slice(0, 4)).toEqual([0, 0, 2, 800]);
    expect((await decide(l, { key, t: T0 + 200 * MS, cost: 2, entry: "new" })).slice(0, 3)).toEqual([1, 1, 0]);
    expect(await sumOf(key)).toBe(5);
    // the two units of "old" leave at 1 s: trimmed, taken off the sum
    expect((await decide(l, { key, t: T0 + 1_000 * MS, cost: 2, entry: "next" })).slice(0, 3)).toEqual([1, 1, 0]);
    expect(await members(key)).toEqual(["old2:1", "new*2", "next*2"]);
    expect(await sumOf(key)).toBe(5);
  });

  it("counts an entry id used twice once (moved to its later time), so the sum never drifts from its members", async () => {
    const l = logLimit(10);
    const key = freshKey();
    await decide(l, { key, t: T0, cost: 3, entry: "twice" });
    expect((await decide(l, { key, t: T0 + 100 * MS, cost: 3, entry: "twice" })).slice(0, 3)).toEqual([1, 1, 7]);
    expect(await members(key)).toEqual(["twice*3"]);
    expect(await sumOf(key)).toBe(3);
    expect(Number(await redis.zscore(key, "twice*3"))).toBe(T0 + 100 * MS);
  });
});
