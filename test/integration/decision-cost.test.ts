import { DECIDE_COMMANDS } from "../../src/features/rate-limit/decision/commands.js";
import { readFileSync } from "node:fs";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stripUnknownFlags, RespClient, type RespArg } from "@sluice/dev";
import { loadConfig, type Limit } from "../../src/config/index.js";
import type { SluiceInput } from "../../src/config/schema.js";
import { scriptCall, type ScriptBucket, type ScriptMode } from "../../src/features/rate-limit/decision/decision.js";
import { MAX_OVERRIDES } from "../../src/features/rate-limit/decision/overrides.js";
import { call, commandCalls, type RedisStack, sleep, useStack } from "./stack.js";

/*
 * What a decision costs on Upstash, which bills every command a script runs (EVALSHA included):
 * counted in INFO commandstats of a real redis-server, which counts the commands a script runs
 * too. Target: one limit EVALSHA + TIME + MGET + SET = 4, three limits 6; overrides passed in
 * ARGV by the isolate, not read by the script on every decision.
 */

const rig = useStack({ origin: false });
let stack: RedisStack;
let resp: RespClient;
beforeAll(() => {
  stack = rig.stack;
  resp = RespClient.fromUrl(stack.redis.url);
});
afterAll(() => resp?.close());

/** Calls per command since `before`, without our own INFO, and with their sum: the billed commands. */
async function billedSince(before: Record<string, number>): Promise<{ total: number; by: Record<string, number> }> {
  const after = await commandCalls(stack);
  const by: Record<string, number> = Object.fromEntries(
    Object.entries(after)
      .filter(([name]) => name !== "info")
      .map(([name, n]): [string, number] => [name, n - (before[name] ?? 0)])
      .filter(([, n]) => n !== 0),
  );
  return { total: Object.values(by).reduce((a, b) => a + b, 0), by };
}

describe("decide.lua's billed commands (the production script, run by EVALSHA)", () => {
  /** As stock Redis 7 takes it: Upstash's own shebang flag removed, as the dev bridge does. */
  const source = readFileSync("lua/decide.lua", "utf8");
  const script = stripUnknownFlags(source) ?? source;
  let sha = "";
  let run = 0;

  function limitsOf(defs: Array<Record<string, unknown>>): Limit[] {
    const r = loadConfig({
      ORIGIN_URL: "https://o.example",
      SLUICE: { routes: [{ name: "r", match: "/", limits: defs.map((d, i) => ({ name: `l${i}`, ...d })) }] },
    });
    if (!r.ok) throw r.error;
    return r.config.routes[0]!.limits;
  }

  async function evalsha(buckets: ScriptBucket[], mode: ScriptMode = "take"): Promise<number[]> {
    if (!sha) sha = String(await resp.send(["SCRIPT", "LOAD", script]));
    const { keys, args } = scriptCall(buckets, mode);
    const reply = await resp.send(["EVALSHA", sha, keys.length, ...keys, ...args] as RespArg[]);
    if (!Array.isArray(reply)) throw new Error(`decide.lua answered ${String(reply)}`);
    return reply as number[];
  }

  /** One decision, and what it cost. */
  async function measured(buckets: ScriptBucket[], mode: ScriptMode = "take") {
    const before = await commandCalls(stack);
    const reply = await evalsha(buckets, mode);
    return { reply, ...(await billedSince(before)) };
  }

  const fresh = (limits: Limit[]) => {
    run++;
    return limits.map((limit, i) => ({ limit, key: `cost:r:l${i}:${run}` }));
  };
  const one = limitsOf([{ rate: 10, period: "1s" }]);
  const three = limitsOf([
    { rate: 10, period: "1s" },
    { algorithm: "fixed_window", rate: 10, period: "1s" },
    { algorithm: "sliding_window", rate: 10, period: "1s" },
  ]);

  it("one limit: EVALSHA + TIME + MGET + SET = 4", async () => {
    await evalsha(fresh(one)); // the script is loaded outside the count
    const m = await measured(fresh(one));
    if (process.env.SLUICE_TEST_LOGS) console.log(`one limit: ${m.total} billed commands ${JSON.stringify(m.by)}`);
    expect(m.reply[0]).toBe(1);
    expect(m.by).toEqual({ evalsha: 1, time: 1, mget: 1, set: 1 });
    expect(m.total).toBe(4);
  });

  it("three limits (three algorithms): EVALSHA + TIME + MGET + three SETs = 6", async () => {
    const m = await measured(fresh(three));
    if (process.env.SLUICE_TEST_LOGS) console.log(`three limits: ${m.total} billed commands ${JSON.stringify(m.by)}`);
    expect(m.reply[0]).toBe(1);
    expect(m.by).toEqual({ evalsha: 1, time: 1, mget: 1, set: 3 });
    expect(m.total).toBeLessThanOrEqual(6);
  });

  it("a refusal and a peek write nothing: 3", async () => {
    const buckets = fresh(
      limitsOf([
        { rate: 1, period: "1h" },
        { rate: 10, period: "1h" },
        { rate: 10, period: "1h" },
      ]),
    );
    await evalsha(buckets);
    const refused = await measured(buckets);
    expect(refused.reply[0]).toBe(0);
    expect(refused.by).toEqual({ evalsha: 1, time: 1, mget: 1 });
    const peek = await measured(fresh(three), "peek");
    expect(peek.by).toEqual({ evalsha: 1, time: 1, mget: 1 });
  });

  it("a sliding log: 6 admitted (ZRANGEBYSCORE, ZADD, PEXPIRE for the SET; +ZRANGE on a fresh key), 6 refused, 5 for a peek, whatever the cost", async () => {
    const [limit] = limitsOf([{ algorithm: "sliding_log", rate: 2_000, period: "1h" }]);
    run++;
    const bucket = (entry: string, cost = 1): ScriptBucket => ({
      limit: limit as Limit,
      key: `cost:r:log:${run}`,
      entry,
      params: { rate: 2_000, period: 3_600_000, burst: 2_000, cost },
    });
    // a fresh key has no running sum yet: one ZRANGE finds it empty
    const first = await measured([bucket("a", 1_000)]);
    expect(first.reply[0]).toBe(1);
    expect(first.by).toEqual({ evalsha: 1, time: 1, mget: 1, zrangebyscore: 1, zrange: 1, zadd: 1, pexpire: 1 });
    // the next, of any cost: one ZADD for its one member and the sum
    const second = await measured([bucket("b", 999)]);
    expect(second.reply[0]).toBe(1);
    expect(second.by).toEqual({ evalsha: 1, time: 1, mget: 1, zrangebyscore: 1, zadd: 1, pexpire: 1 });
    // a cost of 2 on one unit left: refused, with the members that must leave found in one range, the newest for the reset
    const refused = await measured([bucket("c", 2)]);
    expect(refused.reply[0]).toBe(0);
    expect(refused.by).toEqual({ evalsha: 1, time: 1, mget: 1, zrangebyscore: 2, zrange: 1 });
    const peek = await measured([bucket("d")], "peek");
    expect(peek.by).toEqual({ evalsha: 1, time: 1, mget: 1, zrangebyscore: 1, zrange: 1 });
  });

  it("a split limit reads its share in the same MGET and adds its demand INCRBY (+ PEXPIRE when a count starts)", async () => {
    const [limit] = limitsOf([{ rate: 10, period: "1s", scope: "split" }]);
    run++;
    const bucket: ScriptBucket = {
      limit: limit as Limit,
      key: `cost:r:l0:${run}`,
      split: { shareKey: `cost:r:l0:share:${run}`, demandKey: `cost:r:l0:demand:${run}`, start: { rate: 5, burst: 5 } },
    };
    await resp.send(["SET", `cost:r:l0:share:${run}`, "3:3"]);
    const first = await measured([bucket]);
    expect(first.by).toEqual({ evalsha: 1, time: 1, mget: 1, incrby: 1, pexpire: 1, set: 1 });
    expect(first.reply[2]).toBe(2); // the share's burst of 3, read in the MGET, minus this request
    const second = await measured([bucket]);
    expect(second.by).toEqual({ evalsha: 1, time: 1, mget: 1, incrby: 1, set: 1 });
  });

  describe("overrides in ARGV", () => {
    const nowMs = async () => {
      const [s, us] = (await resp.send(["TIME"])) as Buffer[];
      return Number(s) * 1000 + Math.floor(Number(us) / 1000);
    };
    const limit = limitsOf([{ rate: 2, period: "1h" }]);

    it("apply without a read of the override hash (still 4), the client's own over everybody's", async () => {
      const until = (await nowMs()) + 60_000;
      const [b] = fresh(limit);
      const m = await measured([
        { ...b!, override: { everybody: `10:10:3600000:${until}`, own: `50:50:3600000:${until}` } },
      ]);
      expect(m.reply.slice(0, 3)).toEqual([1, 1, 49]);
      expect(m.by).toEqual({ evalsha: 1, time: 1, mget: 1, set: 1 });
      const [c] = fresh(limit);
      expect((await evalsha([{ ...c!, override: { everybody: `10:10:3600000:${until}` } }])).slice(0, 3)).toEqual([
        1, 1, 9,
      ]);
    });

    it("are ignored once Redis's clock has passed their until_ms, whatever the caller's clock says", async () => {
      const now = await nowMs();
      const [b] = fresh(limit);
      // the client's own has expired by Redis's clock: everybody's applies
      expect(
        (
          await evalsha([
            { ...b!, override: { everybody: `10:10:3600000:${now + 60_000}`, own: `50:50:3600000:${now - 1}` } },
          ])
        ).slice(0, 3),
      ).toEqual([1, 1, 9]);
      const [c] = fresh(limit);
      expect((await evalsha([{ ...c!, override: { everybody: `10:10:3600000:${now - 1}` } }])).slice(0, 3)).toEqual([
        1, 1, 1,
      ]);
    });

    it('"read": the script reads both fields from the hash itself, one HMGET more', async () => {
      const until = (await nowMs()) + 60_000;
      const [b] = fresh(limit);
      const hash = b!.key.slice(b!.key.lastIndexOf(":") + 1);
      await resp.send([
        "HSET",
        "cost:r:overrides",
        "l0:*",
        `10:10:3600000:${until}`,
        `l0:${hash}`,
        `50:50:3600000:${until}`,
      ]);
      const m = await measured([{ ...b!, override: "read" }]);
      expect(m.reply.slice(0, 3)).toEqual([1, 1, 49]);
      expect(m.by).toEqual({ evalsha: 1, time: 1, hmget: 1, mget: 1, set: 1 });
    });
  });
});

describe("through the Worker", () => {
  const SLUICE: SluiceInput = {
    key_prefix: "c",
    timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
    routes: [
      { name: "one", match: "/one", limits: [{ name: "per-ip", rate: 1000, period: "1s" }] },
      {
        name: "three",
        match: "/three",
        limits: [
          { name: "per-ip", rate: 1000, period: "1s" },
          { name: "per-path", key: "path", algorithm: "fixed_window", rate: 100_000, period: "1s" },
          { name: "site", key: "global", algorithm: "sliding_window", rate: 100_000, period: "1s" },
        ],
      },
      { name: "tight", match: "/tight", limits: [{ name: "per-ip", rate: 2, period: "1h" }] },
      { name: "crowded", match: "/crowded", limits: [{ name: "per-ip", rate: 2, period: "1h" }] },
      { name: "quota", match: "/quota", peek: "three" },
    ],
  };
  const ADMIN = "operator-token-0123456789";
  /** Commands decide.lua may run; the Worker's background work (lists, overrides, metrics) uses others. */
  const SCRIPT = DECIDE_COMMANDS;

  const workerRig = useStack({ sluice: SLUICE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN }, stack: () => rig.stack });
  let mf: Miniflare;
  beforeAll(() => {
    mf = workerRig.mf;
  });

  const scriptCommands = async (): Promise<Record<string, number>> => {
    const all = await commandCalls(stack);
    return Object.fromEntries(SCRIPT.map((c) => [c, all[c] ?? 0]));
  };
  const since = (before: Record<string, number>, after: Record<string, number>) =>
    Object.fromEntries(
      Object.entries(after)
        .map(([c, n]) => [c, n - (before[c] ?? 0)])
        .filter(([, n]) => n !== 0),
    );
  const admin = (path: string, method: string, body: unknown) =>
    call(mf, `/__sluice${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });

  it("a decision costs 4 billed commands with one limit and 6 with three, and reads no override hash", async () => {
    // each route's first decision finds no copy of its overrides yet: the script reads them, the copy loads meanwhile
    expect((await call(mf, "/one", { ip: "192.0.2.200" })).status).toBe(200);
    expect((await call(mf, "/three", { ip: "192.0.2.200" })).status).toBe(200);
    await sleep(100);
    for (const [path, perDecision] of [
      ["/one", { evalsha: 1, time: 1, mget: 1, set: 1 }],
      ["/three", { evalsha: 1, time: 1, mget: 1, set: 3 }],
    ] as const) {
      const before = await scriptCommands();
      for (let i = 0; i < 10; i++)
        expect((await call(mf, path, { ip: `192.0.2.${i + 1}` })).headers.get("sluice-decision")).toBe("allow");
      const used = since(before, await scriptCommands());
      expect(used, path).toEqual(Object.fromEntries(Object.entries(perDecision).map(([c, n]) => [c, n * 10])));
    }
  });

  it("a peek is sent read-only (EVAL_RO once, then EVALSHA_RO) and writes nothing", async () => {
    expect((await call(mf, "/quota", { ip: "192.0.2.150" })).status).toBe(200);
    await sleep(100);
    const before = await scriptCommands();
    for (let i = 0; i < 5; i++)
      expect((await call(mf, "/quota", { ip: "192.0.2.150" })).headers.get("ratelimit")).toMatch(/^"per-ip";r=1000;/);
    expect(since(before, await scriptCommands())).toEqual({ evalsha_ro: 5, time: 5, mget: 5 });
  });

  it("an override applies on the isolate's very next decision (the reply's version says the copy is behind: one HMGET), then from the refetched copy (no HMGET)", async () => {
    const ip = "192.0.2.100";
    expect((await call(mf, "/tight", { ip })).status).toBe(200);
    expect((await call(mf, "/tight", { ip })).status).toBe(200);
    expect((await call(mf, "/tight", { ip })).status).toBe(429); // and the isolate now holds the bucket as closed
    await sleep(1_100); // past the second a held refusal is trusted: the next request asks Redis
    const before = await scriptCommands();
    expect(
      (
        await admin("/overrides", "PUT", {
          route: "tight",
          limit: "per-ip",
          rate: 10,
          burst: 10,
          period: "1s",
          identity: { ip },
          ttl: "1m",
        })
      ).status,
    ).toBe(200);
    // the next decision: its copy was read at the old version, the script sees the new one and reads the hash
    expect((await call(mf, "/tight", { ip })).status).toBe(200);
    expect(since(before, await scriptCommands()).hmget).toBe(1);
    await sleep(100); // the copy's refetch, deferred by that decision
    const refetched = await scriptCommands();
    expect((await call(mf, "/tight", { ip })).status).toBe(200);
    expect((await call(mf, "/tight", { ip: "192.0.2.101" })).headers.get("ratelimit")).toMatch(/^"per-ip";r=1;/); // others unchanged
    expect(since(refetched, await scriptCommands()).hmget ?? 0).toBe(0);
  });

  it(`a route with more than ${MAX_OVERRIDES} overrides is not copied: its decisions read the hash in the script, and the overrides still apply`, async () => {
    const until = Date.now() + 60_000;
    const fields = Array.from({ length: MAX_OVERRIDES }, (_, i) => [
      `per-ip:${String(i).padStart(32, "0")}`,
      `3:3:3600000:${until}`,
    ]).flat();
    await resp.send(["HSET", "c:crowded:overrides", "per-ip:*", `50:50:3600000:${until}`, ...fields]);
    expect((await call(mf, "/crowded", { ip: "192.0.2.150" })).status).toBe(200);
    await sleep(100); // the first copy was refused for its size: the script reads the hash from then on
    expect((await call(mf, "/crowded", { ip: "192.0.2.150" })).status).toBe(200);
    const before = await scriptCommands();
    for (let i = 0; i < 5; i++)
      expect((await call(mf, "/crowded", { ip: `192.0.2.${160 + i}` })).headers.get("ratelimit")).toMatch(
        /^"per-ip";r=49;/,
      );
    expect(since(before, await scriptCommands())).toEqual({ evalsha: 5, time: 5, hmget: 5, mget: 5, set: 5 });
  });
});
