import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import { fileRedis } from "./stack.js";

/*
 * How long lua/idempotency.lua keeps a record, and what lua/idempotency.lua and lua/session.lua
 * give back, run by a real Redis on clocks the test passes ("clock:{µs}", as a store passes the
 * isolate's where Redis refuses TIME). A claim tells the record its call's longest life: the record
 * is kept that long plus `ttl` whether its holder renews or not, in flight and once lapsed, so a
 * holder cut off from Redis (or lapsed early by a duplicate on a clock ahead) never leaves its key
 * free while its call may run; the holder's renewal of a lapsed claim keeps the record and leaves
 * it indeterminate. `release_unsent` gives a claim or lock back only while nothing of it can have
 * been sent.
 */

const db = fileRedis();
const sha = { idem: "", session: "" };
beforeAll(async () => {
  sha.idem = await db.redis.scriptLoad(readFileSync("lua/idempotency.lua", "utf8"));
  sha.session = await db.redis.scriptLoad(readFileSync("lua/session.lua", "utf8"));
});

const T0 = 1_764_000_000_000_000; // µs
const S = 1_000_000; // µs
const LEASE = 1_000;
const TTL = 3_000;
const LIFE = 60_000;
let run = 0;

/** A fresh key; `op` on it as `owner` on the clock `atUs`, the ledger context "{}". */
function record() {
  run++;
  const keys = [`gll:idem:r:${run}`, "gll:idem:r:fence", "gll:ledger", `gll:idem:r:replays:${run}`];
  const op = (name: string, owner: string, atUs: number, ...rest: Array<string | number>) =>
    db.redis.evalsha(sha.idem, keys, [name, owner, "r", `h${run}`, 100, ...rest, "{}", `clock:${atUs}`]) as Promise<
      unknown[]
    >;
  const claim = (owner: string, atUs: number, life?: number, lease = LEASE) =>
    op("claim", owner, atUs, "fp", lease, TTL, S, 1, ...(life === undefined ? [] : [life]));
  const field = (name: string) => db.redis.hget(keys[0] as string, name) as Promise<string | null>;
  const pttl = () => db.redis.pttl(keys[0] as string);
  return { key: keys[0] as string, op, claim, field, pttl };
}

const ledgerLength = async () => Number(await db.redis.xlen("gll:ledger"));

describe("an idempotency record is kept as long as its call may run", () => {
  it("in flight: its call's life plus ttl, however short the lease, renewed or not", async () => {
    const r = record();
    expect((await r.claim("live", T0, LIFE))[0]).toBe("claimed");
    expect(Number(await r.field("life_until"))).toBe(T0 / 1000 + LIFE);
    expect(await r.pttl()).toBeGreaterThan(LIFE + TTL - 5_000);
    expect(await r.op("renew", "live", T0 + S / 2, LEASE)).toEqual(["ok"]);
    expect(await r.pttl()).toBeGreaterThan(LIFE + TTL - 5_000);
    // a claim that tells no life (an older caller) is kept as before: the lease plus ttl
    const old = record();
    expect((await old.claim("live", T0))[0]).toBe("claimed");
    expect(await old.pttl()).toBeLessThanOrEqual(LEASE + TTL);
  });

  it("lapsed: until the call's end plus ttl, not ttl from the lapse", async () => {
    const r = record();
    expect((await r.claim("holder", T0, LIFE))[0]).toBe("claimed");
    // the holder lost Redis: a duplicate 5 s on finds its lease lapsed
    expect((await r.claim("dup", T0 + 5 * S, LIFE))[0]).toBe("indeterminate");
    expect(await r.field("lapsed")).toBe("1");
    expect(await r.pttl()).toBeGreaterThan(LIFE - 5_000 + TTL - 5_000);
    // past the call's life, a lapse still keeps the key ttl from then (and never less than it had)
    const late = record();
    expect((await late.claim("holder", T0, LEASE * 2))[0]).toBe("claimed");
    expect((await late.claim("dup", T0 + 10 * S))[0]).toBe("indeterminate");
    const kept = await late.pttl();
    expect(kept).toBeGreaterThan(TTL - 2_000);
    expect(kept).toBeLessThanOrEqual(LEASE * 2 + TTL);
  });

  it("the holder's renewal of a lapsed claim keeps its record lease + ttl from then, indeterminate; its answer still lands", async () => {
    const r = record();
    expect((await r.claim("holder", T0, 0))[0]).toBe("claimed");
    expect((await r.claim("dup", T0 + 5 * S))[0]).toBe("indeterminate");
    expect(await r.pttl()).toBeLessThanOrEqual(LEASE + TTL);
    // the holder is back: its renewal is taken (it goes on renewing) and keeps the record
    expect(await r.op("renew", "holder", T0 + 6 * S, 10_000)).toEqual(["ok"]);
    expect(await r.pttl()).toBeGreaterThan(10_000 + TTL - 5_000);
    expect(await r.field("state")).toBe("indeterminate");
    expect((await r.claim("dup", T0 + 7 * S))[0]).toBe("indeterminate");
    // nobody else renews it
    expect(await r.op("renew", "dup", T0 + 7 * S, 10_000)).toEqual(["not_owner"]);
    expect(await r.op("complete", "holder", T0 + 8 * S, 201, "[]", "", 1, 60_000)).toEqual(["ok"]);
    expect((await r.claim("dup", T0 + 9 * S))[0]).toBe("completed");
  });

  it("a live claim lapsed early by a duplicate on a clock ahead is never free, and settles with the holder's answer", async () => {
    const r = record();
    // the holder's isolate runs 2 s behind the duplicate's: to the duplicate the 1 s lease is over
    expect((await r.claim("holder", T0, LIFE))[0]).toBe("claimed");
    expect((await r.claim("dup", T0 + 2 * S + 1))[0]).toBe("indeterminate");
    expect(await r.op("renew", "holder", T0 + S / 3, LEASE)).toEqual(["ok"]);
    expect(await r.pttl()).toBeGreaterThan(LIFE - 2_000 + TTL - 5_000);
    expect((await r.claim("dup", T0 + 3 * S))[0]).toBe("indeterminate");
    expect(await r.op("complete", "holder", T0 + S, 200, "[]", "", 1, 60_000)).toEqual(["ok"]);
    expect((await r.claim("dup", T0 + 4 * S))[0]).toBe("completed");
  });

  it("a queued job's delivery moves its life on: start keeps the record the delivery's life plus ttl", async () => {
    const r = record();
    expect((await r.claim("job:a", T0, LEASE, LEASE))[0]).toBe("claimed");
    expect(await r.pttl()).toBeLessThanOrEqual(LEASE + TTL);
    expect(await r.op("start", "job:a", T0 + S / 2, LEASE, LIFE)).toEqual(["ok"]);
    expect(Number(await r.field("life_until"))).toBe(T0 / 1000 + 500 + LIFE);
    expect(await r.pttl()).toBeGreaterThan(LIFE + TTL - 5_000);
  });
});

describe("release_unsent gives back only what nothing can have reached the origin", () => {
  it("idempotency: an unsent claim is released (in flight or lapsed); a started one is left held; another's is not touched, nor ledgered", async () => {
    const live = record();
    expect((await live.claim("live", T0, LIFE))[0]).toBe("claimed");
    expect(await live.op("release_unsent", "live", T0, "")).toEqual(["ok"]);
    expect(await live.field("state")).toBeNull();

    const lapsed = record();
    expect((await lapsed.claim("live", T0, LIFE))[0]).toBe("claimed");
    expect((await lapsed.claim("dup", T0 + 5 * S))[0]).toBe("indeterminate");
    expect(await lapsed.op("release_unsent", "live", T0 + 6 * S, "")).toEqual(["ok"]);
    expect((await lapsed.claim("dup", T0 + 7 * S))[0]).toBe("claimed");

    const job = record();
    expect((await job.claim("job:j", T0, LIFE, LIFE))[0]).toBe("claimed");
    expect(await job.op("start", "job:j", T0, LEASE, LIFE)).toEqual(["ok"]);
    expect(await job.op("release_unsent", "job:j", T0, "")).toEqual(["sent"]);
    expect(await job.field("state")).toBe("inflight");
    // a parked job (its 5xx did not act) is unsent again
    expect(await job.op("park", "job:j", T0, LIFE)).toEqual(["ok"]);
    expect(await job.op("release_unsent", "job:j", T0, "")).toEqual(["ok"]);

    const other = record();
    expect((await other.claim("owner", T0, LIFE))[0]).toBe("claimed");
    const before = await ledgerLength();
    expect(await other.op("release_unsent", "someone-else", T0, "")).toEqual(["not_owner"]);
    expect(await ledgerLength()).toBe(before);
    expect(await other.field("state")).toBe("inflight");
  });

  it("sessions: a job's lock whose delivery began is left to its lease; unsent (or parked), it is released", async () => {
    run++;
    const keys = [`gll:session:${run}`, "gll:session:fence", "gll:ledger"];
    const op = (name: string, owner: string, ...rest: Array<string | number>) =>
      db.redis.evalsha(sha.session, keys, [name, owner, "r", "h", 100, ...rest, `clock:${T0}`]) as Promise<unknown[]>;
    expect((await op("acquire", "job:s", 30_000))[0]).toBe("granted");
    expect(await op("start", "job:s", 30_000)).toEqual(["ok"]);
    expect(await op("release_unsent", "job:s")).toEqual(["sent"]);
    expect(await db.redis.hget(keys[0] as string, "owner")).toBe("job:s");
    expect(await op("park", "job:s", 30_000)).toEqual(["ok"]);
    const before = await ledgerLength();
    expect(await op("release_unsent", "someone-else")).toEqual(["not_owner"]);
    expect(await ledgerLength()).toBe(before);
    expect(await op("release_unsent", "job:s")).toEqual(["ok"]);
    expect(await db.redis.exists(keys[0] as string)).toBe(0);
    // start and park are the holder's only
    expect((await op("acquire", "job:t", 30_000))[0]).toBe("granted");
    expect(await op("start", "someone-else", 30_000)).toEqual(["not_owner"]);
  });
});
