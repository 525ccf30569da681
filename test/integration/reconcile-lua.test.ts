import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import { asHash } from "../../src/store/replies.js";
import { fileRedis } from "./stack.js";

/*
 * lua/reconcile.lua against this file's Redis, on a clock the test passes ("clock:{µs}", as the
 * isolate does where Redis refuses TIME in scripts): an answer is applied only to the claim asked
 * about (its fencing token, still indeterminate and not in its call's life, or still the queued
 * job's), a failure backs off doubling to an hour, the cron's look prunes the index, and the
 * dashboard's count reads it.
 */

const db = fileRedis();
let sha = "";
let idemSha = "";
beforeAll(async () => {
  sha = await db.redis.scriptLoad(readFileSync("lua/reconcile.lua", "utf8"));
  idemSha = await db.redis.scriptLoad(readFileSync("lua/idempotency.lua", "utf8"));
});

const NOW_MS = 1_764_000_000_000; // late 2025
const clock = (ms: number) => `clock:${ms * 1000}`;
let run = 0;

/** Fresh keys: a record, the route's index, the ledger. */
function keys() {
  run++;
  return { record: `rl:idem:r${run}:h`, index: `rl:idem:r${run}:indeterminate`, ledger: `rl:ledger:${run}` };
}
type Keys = ReturnType<typeof keys>;

async function seed(k: Keys, fields: Record<string, string>, since = NOW_MS - 60_000): Promise<void> {
  await db.redis.hset(k.record, { state: "indeterminate", owner: "o-1", fence: "100", ...fields });
  await db.redis.zadd(k.index, { score: since, member: "h" });
}

async function apply(k: Keys, op: string, fence: string, rest: Array<string | number>, job = "", at = NOW_MS) {
  const args = [op, "r", "h", 100, fence, job, ...rest, JSON.stringify({ trace: "t" }), clock(at)];
  return (await db.redis.evalsha(sha, [k.record, k.index, k.ledger], args.map(String))) as unknown[];
}
const found = (k: Keys, fence: string, job = "", at = NOW_MS) =>
  apply(k, "found", fence, [201, '[["content-type","application/json"]]', "e30=", 1, 86_400_000], job, at);
/** The record's fields (replies come as Redis sent them), or null when it is gone. */
const record = async (k: Keys): Promise<Record<string, string> | null> => {
  const fields = asHash(await db.redis.hgetall(k.record));
  return Object.keys(fields).length ? fields : null;
};
/** The ledger's entries as `event:status`, oldest first. */
const ledgered = async (k: Keys): Promise<string[]> => {
  const entries = (await db.redis.xrange(k.ledger, "-", "+")) as unknown as Array<[string, string[]]>;
  return entries.map(([, fields]) => asHash(fields)).map((e) => `${e.event}:${e.status}`);
};

describe("reconcile.lua: found, absent, failed", () => {
  it("found: the answer stored for the claim asked about, the key out of the index, ledgered", async () => {
    const k = keys();
    await seed(k, { key: "order-1" });
    expect(await found(k, "100")).toEqual(["ok"]);
    const r = await record(k);
    expect(r).toMatchObject({ state: "completed", status: "201", body: "e30=", stored: "1", fence: "100" });
    expect(r?.key).toBeUndefined();
    expect(await db.redis.zcard(k.index)).toBe(0);
    expect(await ledgered(k)).toEqual(["reconciled:201"]);
  });

  it("an answer about another claim (another fencing token) changes nothing", async () => {
    const k = keys();
    await seed(k, {});
    expect(await found(k, "99")).toEqual(["stale", "indeterminate", "100"]);
    expect(await apply(k, "absent", "99", [])).toEqual(["stale", "indeterminate", "100"]);
    expect(await record(k)).toMatchObject({ state: "indeterminate", fence: "100" });
    expect(await db.redis.zcard(k.index)).toBe(1);
    expect(await ledgered(k)).toEqual([]);
  });

  it("absent: an indeterminate key released; a completed or resolved one untouched", async () => {
    const k = keys();
    await seed(k, {});
    expect(await apply(k, "absent", "100", [])).toEqual(["ok"]);
    expect(await record(k)).toBeNull();
    expect(await db.redis.zcard(k.index)).toBe(0);
    expect(await ledgered(k)).toEqual(["reconciled:404"]);

    const done = keys();
    await seed(done, { state: "completed" });
    expect(await apply(done, "absent", "100", [])).toEqual(["stale", "completed", "100"]);
    expect(await record(done)).toMatchObject({ state: "completed" });
  });

  it("a lapsed claim is never reconciled while its call may still run", async () => {
    const k = keys();
    await seed(k, { lapsed: "1", life_until: String(NOW_MS + 1) });
    expect((await apply(k, "absent", "100", []))[0]).toBe("stale");
    expect(await record(k)).toMatchObject({ state: "indeterminate" });
    expect(await apply(k, "absent", "100", [], "", NOW_MS + 1)).toEqual(["ok"]);
  });

  it("a queued job's own claim: absent unmarks its delivery, found completes it; another owner's is stale", async () => {
    const k = keys();
    await seed(k, { state: "inflight", owner: "job:a", sent: "1" });
    expect((await apply(k, "absent", "100", [], "job:b"))[0]).toBe("stale");
    expect((await apply(k, "absent", "100", []))[0]).toBe("stale"); // in flight, asked as a key: never
    expect(await apply(k, "absent", "100", [], "job:a")).toEqual(["ok"]);
    const r = await record(k);
    expect([r?.state, r?.owner, r?.sent]).toEqual(["inflight", "job:a", undefined]);
    expect(await found(k, "100", "job:a")).toEqual(["ok"]);
    expect(await record(k)).toMatchObject({ state: "completed", owner: "job:a" });
  });

  it("failed: the next question waits reconcile_after, doubling per failure, at most an hour", async () => {
    const k = keys();
    await seed(k, {});
    const waits: number[] = [];
    for (let i = 0; i < 14; i++) {
      expect(await apply(k, "failed", "100", [503, 1_000])).toEqual(["ok"]);
      waits.push(Number((await record(k))?.reconcile_next) - NOW_MS);
    }
    expect(waits.slice(0, 4)).toEqual([1_000, 2_000, 4_000, 8_000]);
    expect(waits.slice(-2)).toEqual([3_600_000, 3_600_000]);
    expect((await record(k))?.state).toBe("indeterminate");
    expect((await ledgered(k)).every((e) => e === "reconcile_failed:503")).toBe(true);
  });
});

describe("reconcile.lua: the index", () => {
  it("peek returns the indeterminate keys with what the cron needs, and prunes the rest", async () => {
    const k = keys();
    const rec = (h: string) => k.record.replace(/:h$/, `:${h}`);
    await db.redis.hset(rec("a"), { state: "indeterminate", fence: "7", key: "ka", reconcile_next: "5" });
    await db.redis.hset(rec("b"), { state: "completed", fence: "8" });
    await db.redis.zadd(k.index, { score: 10, member: "a" }, { score: 20, member: "b" }, { score: 30, member: "c" });
    const oldest = await db.redis.evalsha(sha, [k.index], ["oldest", "2", clock(NOW_MS)]);
    expect(oldest).toEqual(["a", "10", "b", "20"]);
    const peek = await db.redis.evalsha(
      sha,
      [k.index, rec("a"), rec("b"), rec("c")],
      ["peek", "a", "b", "c", clock(NOW_MS)],
    );
    expect(peek).toEqual([NOW_MS, [["a", "10", "7", "ka", "5", 0]]]);
    expect(await db.redis.zrange(k.index, 0, -1)).toEqual(["a"]);
  });

  it("waiting counts each index and the oldest member's age", async () => {
    const k = keys();
    const other = keys();
    await db.redis.zadd(k.index, { score: NOW_MS - 5_000, member: "x" }, { score: NOW_MS - 1_000, member: "y" });
    const waiting = await db.redis.evalsha(sha, [k.index, other.index], ["waiting", clock(NOW_MS)]);
    expect(waiting).toEqual([
      NOW_MS,
      [
        [2, String(NOW_MS - 5_000)],
        [0, ""],
      ],
    ]);
  });
});

describe("idempotency.lua keeps the index of indeterminate keys", () => {
  /** lua/idempotency.lua on one key (hash `h`) of a fresh route, its index as KEYS[6]. */
  function idem() {
    const k = keys();
    const all = [k.record, `${k.index}:fence`, k.ledger, `${k.index}:rp`, `${k.index}:rp`, k.index];
    const op = (name: string, owner: string, atMs: number, ...rest: Array<string | number>) =>
      db.redis.evalsha(idemSha, all, [name, owner, "r", "h", 100, ...rest, "{}", clock(atMs)].map(String)) as Promise<
        unknown[]
      >;
    const claim = (owner: string, atMs: number, life = 60_000) =>
      op("claim", owner, atMs, "fp", 1_000, 600_000, 1_000_000, 1, life, "order-1");
    const members = async () => (await db.redis.zrange(k.index, 0, -1, { withScores: true })).map(String);
    return { k, op, claim, members };
  }

  it("a hold joins it (as of then), keeps the key itself for the cron, and a resolution leaves it", async () => {
    const r = idem();
    expect((await r.claim("a", NOW_MS))[0]).toBe("claimed");
    expect((await record(r.k))?.key).toBe("order-1");
    expect(await r.members()).toEqual([]);
    expect(await r.op("hold", "a", NOW_MS + 5, "")).toEqual(["ok"]);
    expect(await r.members()).toEqual(["h", String(NOW_MS + 5)]);
    expect(await r.claim("b", NOW_MS + 6)).toEqual(["indeterminate", expect.anything(), 0]);
    expect(await r.op("resolve_release", "", NOW_MS + 7, "")).toEqual(["ok"]);
    expect(await r.members()).toEqual([]);
  });

  it("a lapse joins it, busy while the call may run; the holder settling it takes it out", async () => {
    const r = idem();
    expect((await r.claim("holder", NOW_MS, 10_000))[0]).toBe("claimed");
    // the lease (1 s) lapsed, the call's life (10 s) is not over: indeterminate and busy
    expect(await r.claim("dup", NOW_MS + 5_000)).toEqual(["indeterminate", expect.anything(), 1]);
    expect(await r.members()).toEqual(["h", String(NOW_MS + 5_000)]);
    expect((await r.claim("dup", NOW_MS + 10_000))[2]).toBe(0);
    expect(await r.op("complete", "holder", NOW_MS + 11_000, 201, "[]", "", 1, 60_000)).toEqual(["ok"]);
    expect(await r.members()).toEqual([]);
  });
});
