import { readFileSync } from "node:fs";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { clockArgs } from "../support/test-clock.js";
import { fileRedis } from "./stack.js";

/*
 * The arithmetic of lua/idempotency.lua and lua/session.lua, on a test clock against this file's
 * Redis: a fencing token is max(last + 1, Redis time in µs) from one key per route (idempotency)
 * or per deployment (sessions), so tokens rise strictly while the key lives and after it expired;
 * a principal's replays are paid from a GCRA bucket, never more than `burst` plus one per interval,
 * and a refused replay's retry-after is exactly when the next one is paid for.
 */

const CLOCK = "redis.call('TIME')";
const REPLAY_TTL = "'PX', int(math.ceil((paid - now_us) / 1000))";

/** A script with the test clock (the two trailing ARGV entries) and, for replays, TTLs a day longer than the simulated ones. */
function onTestClock(path: string): string {
  const source = readFileSync(path, "utf8");
  expect(source.split(CLOCK).length - 1).toBe(1);
  const clocked = source.replace(CLOCK, "{ ARGV[#ARGV - 1], ARGV[#ARGV] }");
  if (!path.endsWith("idempotency.lua")) return clocked;
  expect(clocked.split(REPLAY_TTL).length - 1).toBe(1);
  return clocked.replace(REPLAY_TTL, "'PX', int(math.ceil((paid - now_us) / 1000) + 86400000)");
}

const db = fileRedis();
const sha = { idem: "", session: "", idemReal: "" };
beforeAll(async () => {
  sha.idem = await db.redis.scriptLoad(onTestClock("lua/idempotency.lua"));
  sha.session = await db.redis.scriptLoad(onTestClock("lua/session.lua"));
  sha.idemReal = await db.redis.scriptLoad(readFileSync("lua/idempotency.lua", "utf8"));
});

const T0 = 1_764_000_000_000_000; // µs, late 2025
const DAY_US = 86_400_000_000;
let run = 0;

/** Fresh keys for one idempotency scope: record, the route's fence, ledger, the principal's replay bucket. */
function idemKeys(): { record: (n: number) => string; fence: string; ledger: string; replays: string } {
  run++;
  return {
    record: (n) => `fl:idem:r${run}:${n}`,
    fence: `fl:idem:r${run}:fence`,
    ledger: `fl:ledger`,
    replays: `fl:idem:r${run}:replays:p`,
  };
}

type Keys = ReturnType<typeof idemKeys>;

async function claim(k: Keys, n: number, t: number, replay = { intervalUs: 1_000_000, burst: 1 }): Promise<unknown[]> {
  const keys = [k.record(n), k.fence, k.ledger, k.replays];
  const args = ["claim", `owner-${n}`, "r", `h${n}`, 100, "fp", 30_000, 600_000, replay.intervalUs, replay.burst];
  return (await db.redis.evalsha(sha.idem, keys, [...args, ...clockArgs(t)])) as unknown[];
}

async function acquire(lock: string, t: number): Promise<unknown[]> {
  const keys = [lock, `fl:session:fence:${run}`, "fl:ledger"];
  return (await db.redis.evalsha(sha.session, keys, [
    "acquire",
    "o",
    "r",
    "h",
    100,
    30_000,
    0,
    ...clockArgs(t),
  ])) as unknown[];
}

/**
 * One step of the clock between grants: a few µs or ms on (grants in the same µs too), back a
 * little (a clock stepped back by NTP or a failover) while the key lives, or idle for the key's 30
 * days and more, after which the key is gone.
 */
const stepArb = fc.oneof(
  fc.record({ dt: fc.integer({ min: 0, max: 3 }), idle: fc.constant(false) }),
  fc.record({ dt: fc.integer({ min: 0, max: 5_000_000 }), idle: fc.constant(false) }),
  fc.record({ dt: fc.integer({ min: -2_000_000, max: -1 }), idle: fc.constant(false) }),
  fc.record({ dt: fc.integer({ min: 30 * DAY_US, max: 60 * DAY_US }), idle: fc.constant(true) }),
);

describe("fencing tokens: max(last + 1, Redis µs) from one key", () => {
  it("idempotency: every grant of a route gets a strictly higher token, across clock steps back and an expired key", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 2, maxLength: 25 }), async (steps) => {
        const k = idemKeys();
        let t = T0;
        const tokens: number[] = [];
        for (const [n, s] of steps.entries()) {
          t += s.dt;
          if (s.idle) await db.redis.del(k.fence); // 30 idle days: the key expired
          const [kind, token] = await claim(k, n, t);
          expect(kind).toBe("claimed");
          tokens.push(Number(token));
          // the record and the ledger hold the same integer, written out in full
          expect(await db.redis.hget(k.record(n), "fence")).toBe(String(token));
        }
        for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as number);
        expect(tokens.every((x) => Number.isSafeInteger(x))).toBe(true);
      }),
      { numRuns: 25 },
    );
  });

  it("sessions: every grant under any session gets a strictly higher token, across clock steps back and an expired key", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 2, maxLength: 25 }), async (steps) => {
        run++;
        let t = T0;
        const tokens: number[] = [];
        for (const [n, s] of steps.entries()) {
          t += s.dt;
          if (s.idle) await db.redis.del(`fl:session:fence:${run}`);
          const [kind, token] = await acquire(`fl:session:lock:${run}:${n}`, t);
          expect(kind).toBe("granted");
          tokens.push(Number(token));
          expect(await db.redis.hget(`fl:session:lock:${run}:${n}`, "fence")).toBe(String(token));
        }
        for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as number);
      }),
      { numRuns: 25 },
    );
  });

  it("rises past what a per-scope counter of an older version left in the key", async () => {
    const k = idemKeys();
    await db.redis.set(k.fence, "41");
    const [, token] = await claim(k, 0, T0);
    expect(Number(token)).toBe(T0);
    expect(await db.redis.get(k.fence)).toBe(String(T0));
    // a busy route outruns the clock by a few: still one more each time
    const [, again] = await claim(k, 1, T0);
    expect(Number(again)).toBe(T0 + 1);
  });
});

/** Stores key `n` of scope `k` as completed, so that claims of it are replays. */
async function completed(k: Keys, n: number): Promise<void> {
  await db.redis.hset(k.record(n), { state: "completed", fp: "fp", status: 201, headers: "[]", body: "", stored: 1 });
}

const replayArb = fc.record({
  rate: fc.integer({ min: 1, max: 8 }),
  periodMs: fc.constantFrom(1_000, 60_000, 3_600_000),
  // gaps between duplicates, as fractions of an interval: 0 (a burst) up to three intervals
  gaps: fc.array(fc.double({ min: 0, max: 3, noNaN: true }), { minLength: 1, maxLength: 40 }),
  retryAtOnce: fc.boolean(),
});

describe("replays: a GCRA bucket per principal", () => {
  it("pays at most `burst` plus one per interval, and a refusal's retry-after is when the next is paid", async () => {
    await fc.assert(
      fc.asyncProperty(replayArb, async ({ rate, periodMs, gaps, retryAtOnce }) => {
        const k = idemKeys();
        await completed(k, 0);
        const replay = { intervalUs: Math.ceil((periodMs * 1000) / rate), burst: rate };
        let t = T0;
        const paid: number[] = [];
        for (const g of gaps) {
          t += Math.floor(g * replay.intervalUs);
          const [kind, retryMs] = await claim(k, 0, t, replay);
          if (kind === "completed") {
            paid.push(t);
            continue;
          }
          expect(kind).toBe("replay_limited");
          // refused only when `burst` replays were paid within the last `burst` intervals
          const recent = paid.filter((p) => p >= t - replay.burst * replay.intervalUs);
          expect(recent.length).toBeGreaterThanOrEqual(replay.burst);
          expect(Number(retryMs)).toBeGreaterThan(0);
          expect(Number(retryMs)).toBeLessThanOrEqual(Math.ceil(replay.intervalUs / 1000));
          if (retryAtOnce) {
            // honest: a millisecond early is still refused, at the retry-after it is paid
            const early = await claim(k, 0, t + Number(retryMs) * 1000 - 1_000, replay);
            expect(early[0]).toBe("replay_limited");
            t += Number(retryMs) * 1000;
            expect((await claim(k, 0, t, replay))[0]).toBe("completed");
            paid.push(t);
          }
        }
        // the bound: in any span, at most burst + span / interval replays
        for (let i = 0; i < paid.length; i++)
          for (let j = i; j < paid.length; j++) {
            const span = (paid[j] as number) - (paid[i] as number);
            expect(j - i + 1).toBeLessThanOrEqual(replay.burst + Math.floor(span / replay.intervalUs));
          }
        // a burst of `burst` at once is always paid from a full bucket
        if (gaps.length >= replay.burst && gaps.slice(0, replay.burst).every((g) => g === 0))
          expect(paid.length).toBeGreaterThanOrEqual(replay.burst);
      }),
      { numRuns: 60 },
    );
  });

  it("reads nothing and writes nothing for a refused replay; writes nothing for claims that are not replays", async () => {
    const k = idemKeys();
    await completed(k, 0);
    const replay = { intervalUs: 60_000_000, burst: 1 };
    expect((await claim(k, 0, T0, replay))[0]).toBe("completed");
    const before = await db.redis.get(k.replays);
    expect(await claim(k, 0, T0 + 1, replay)).toEqual(["replay_limited", 60_000]);
    expect(await db.redis.get(k.replays)).toBe(before);
    // a first claim in the scope is not a replay: the bucket is left alone
    const other = idemKeys();
    expect((await claim(other, 1, T0, replay))[0]).toBe("claimed");
    expect(await db.redis.exists(other.replays)).toBe(0);
  });

  it("pays from the client address's bucket too: principals sharing an address share its bound, paid from both or neither", async () => {
    // issue 29, finding 9: under `auto` every invented Authorization is a principal with a bucket of its own
    const replay = { intervalUs: 60_000_000, burst: 3 };
    const address = `fl:idem:addr${run}:replays:a`;
    const principals = Array.from({ length: 4 }, () => idemKeys());
    const replayAs = (k: Keys, t: number, client = address) =>
      db.redis.evalsha(
        sha.idem,
        [k.record(0), k.fence, k.ledger, k.replays, client],
        ["claim", "o", "r", "h", 100, "fp", 30_000, 600_000, replay.intervalUs, replay.burst, ...clockArgs(t)],
      ) as Promise<unknown[]>;
    for (const k of principals) await completed(k, 0);
    const kinds: unknown[] = [];
    for (const k of principals) for (let i = 0; i < 3; i++) kinds.push((await replayAs(k, T0))[0]);
    // 3 at once for the address, whichever principals ask: the rest wait for it, not for their own
    expect(kinds.filter((x) => x === "completed")).toHaveLength(3);
    const refused = await replayAs(principals[3] as Keys, T0);
    expect(refused).toEqual(["replay_limited", 60_000]);
    // neither bucket paid for a refusal: the fourth principal's own is untouched
    expect(await db.redis.exists((principals[3] as Keys).replays)).toBe(0);
    // one interval later the address has room for one more
    expect((await replayAs(principals[3] as Keys, T0 + replay.intervalUs))[0]).toBe("completed");
    // from another address, the principal's own bucket still bounds it: the first principal paid 3 at T0
    const elsewhere = `fl:idem:addr${run}:replays:b`;
    const first = principals[0] as Keys;
    expect((await replayAs(first, T0 + 1, elsewhere))[0]).toBe("replay_limited");
    // the same key for both (the principal is the address) is paid once, not twice
    const self = idemKeys();
    await completed(self, 0);
    for (let i = 0; i < 3; i++) expect((await replayAs(self, T0, self.replays))[0]).toBe("completed");
  });

  it("lives only until the bucket is full again (real clock)", async () => {
    const k = idemKeys();
    await completed(k, 0);
    const keys = [k.record(0), k.fence, k.ledger, k.replays];
    const args = ["claim", "o", "r", "h", 100, "fp", 30_000, 600_000, 20_000_000, 3]; // 3 per minute
    for (let i = 0; i < 3; i++)
      expect(((await db.redis.evalsha(sha.idemReal, keys, args)) as unknown[])[0]).toBe("completed");
    const ttl = await db.redis.pttl(k.replays);
    expect(ttl).toBeGreaterThan(55_000);
    expect(ttl).toBeLessThanOrEqual(60_000);
  });
});
