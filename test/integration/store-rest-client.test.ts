/**
 * sluice's own Upstash REST client (src/store/rest-client.ts) against the project's bridge in front
 * of a real redis-server spawned for this file; and a caller's own `@upstash/redis` client taken
 * as a connection as it is.
 */
import { Redis } from "@upstash/redis";
import { Redis as CloudflareRedis } from "@upstash/redis/cloudflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Bridge, type RedisProcess, startBridge, startRedis } from "@sluice/dev";
import type { RedisClient } from "../../src/store/client.js";
import { StoreError } from "../../src/store/deadline.js";
import { StoreRegistry } from "../../src/store/redis.js";
import { restClient, restEndpointProblem } from "../../src/store/rest-client.js";
import { isNoScript } from "../../src/store/script.js";

const TOKEN = "rest-client-test-token";
let redisProcess: RedisProcess;
let bridge: Bridge;

beforeAll(async () => {
  redisProcess = await startRedis();
  bridge = await startBridge({ redisUrl: redisProcess.url, token: TOKEN });
});

afterAll(async () => {
  await bridge?.close();
  await redisProcess?.stop();
});

const client = (token = TOKEN, timeoutMs = 5_000) => restClient({ url: bridge.url, token, timeoutMs: () => timeoutMs });

async function rejection(p: Promise<unknown>): Promise<Error> {
  const outcome = await p.then(
    (value: unknown) => ({ value }),
    (e: unknown) => ({ error: e }),
  );
  if (!("error" in outcome)) throw new Error(`expected a rejection, got ${JSON.stringify(outcome.value)}`);
  expect(outcome.error).toBeInstanceOf(Error);
  return outcome.error as Error;
}

describe("sluice's REST client", () => {
  it("sends one command per request and gives the reply as Redis sent it", async () => {
    const redis = client();
    const before = bridge.counts().requests;
    expect(await redis.set("rc:s", "42", { px: 60_000 })).toBe("OK");
    expect(await redis.set("rc:s", "43", { ex: 60, nx: true })).toBeNull(); // nx: the key is there
    expect(await redis.get("rc:s")).toBe("42"); // text, not deserialised to a number
    expect(await redis.pttl("rc:s")).toBeGreaterThan(0);
    expect(await redis.hset("rc:h", { a: "1", b: '{"x":1}' })).toBe(2);
    expect(await redis.hgetall("rc:h")).toEqual(["a", "1", "b", '{"x":1}']);
    const id = await redis.xadd("rc:x", "*", { k: "v" }, { trim: { type: "MAXLEN", threshold: 10, comparison: "~" } });
    expect(await redis.xrevrange("rc:x", "+", "-", 5)).toEqual([[id, ["k", "v"]]]);
    expect(await redis.del("rc:s", "rc:h", "rc:x")).toBe(3);
    expect(await redis.ping()).toBe("PONG");
    expect(bridge.counts().requests - before).toBe(10);
  });

  it("sends a pipeline as one request, replies in order", async () => {
    const redis = client();
    const before = bridge.counts();
    const p = redis.pipeline();
    p.incr("rc:n");
    p.pexpire("rc:n", 60_000, "NX");
    p.pexpire("rc:n", 1, "NX"); // NX: it has an expiry already, so no change
    p.zincrby("rc:z", 3, "m");
    p.zincrby("rc:z", 5, "n");
    p.zrange("rc:z", 0, 0, { rev: true, withScores: true });
    p.hmget("rc:none", "f", "g");
    expect(p.length()).toBe(7);
    expect(await p.exec()).toEqual([1, 1, 0, "3", "5", ["n", "5"], [null, null]]);
    const after = bridge.counts();
    expect(after.requests - before.requests).toBe(1);
    expect((after.commands.zincrby ?? 0) - (before.commands.zincrby ?? 0)).toBe(2);
  });

  it("runs scripts; an EVALSHA of a script Redis does not hold is the NOSCRIPT error script.ts knows", async () => {
    const redis = client();
    expect(await redis.eval("return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}", ["k"], ["a", "2"])).toEqual([
      "k",
      "a",
      3,
    ]);
    expect(await redis.evalRo("#!lua flags=no-writes\nreturn 'ro'", [], [])).toBe("ro");
    const error = await rejection(redis.evalsha("0123456789abcdef0123456789abcdef01234567", [], []));
    expect(isNoScript(error)).toBe(true);
    expect(error.message).toMatch(/^NOSCRIPT/);
  });

  it("throws an error reply with Redis's own text, for a command and in a pipeline", async () => {
    const redis = client();
    await redis.set("rc:str", "x", { ex: 60 });
    expect((await rejection(redis.hgetall("rc:str"))).message).toMatch(/^WRONGTYPE/);
    const p = redis.pipeline();
    p.incr("rc:ok");
    p.hget("rc:str", "f");
    expect((await rejection(p.exec() as Promise<unknown>)).message).toMatch(/^WRONGTYPE/);
  });

  it("throws a refused token (401) with its status, never as a reply", async () => {
    const error = await rejection(client("not-the-token").get("k"));
    expect(error.message).toContain("HTTP 401");
    expect(error.message).toContain("Unauthorized");
  });

  it("a refused token (401) is misconfigured, naming the variable, never the token (issue 30, point 4)", async () => {
    const names = { url: "UPSTASH_REDIS_REST_URL_EU", token: "UPSTASH_REDIS_REST_TOKEN_EU" };
    const c = restClient({ url: bridge.url, token: "wrong-s3cret", timeoutMs: () => 5_000, names });
    const error = await rejection(c.get("k"));
    expect(error).toBeInstanceOf(StoreError);
    expect([(error as StoreError).reason, (error as StoreError).variable]).toEqual([
      "misconfigured",
      "UPSTASH_REDIS_REST_TOKEN_EU",
    ]);
    expect(error.message).not.toContain("wrong-s3cret");
    // a middleware's own `redis` option is named as the option
    const option = await rejection(client("wrong-s3cret").get("k"));
    expect((option as StoreError).variable).toBe("redis.token");
  });

  it.each([
    ["127.0.0.1:39943", /is not a URL with a scheme/],
    ["rediss://default:pa55@eu1-x.upstash.io:6379", /is a Redis protocol URL \(rediss:\/\/\)/],
    ["redis://127.0.0.1:6379", /is a Redis protocol URL \(redis:\/\/\)/],
    ["localhost:8079", /is not an http\(s\) URL \(localhost:\/\/\)/],
    ["https://default:pa55@eu1-x.upstash.io", /carries a user and password/],
  ])("a URL that cannot be a REST endpoint (%s) is misconfigured, without a request", async (url, problem) => {
    expect(restEndpointProblem(url)).toMatch(problem);
    const before = bridge.counts().requests;
    const error = await rejection(restClient({ url, token: TOKEN, timeoutMs: () => 5_000 }).get("k"));
    expect([(error as StoreError).reason, (error as StoreError).variable]).toEqual(["misconfigured", "redis.url"]);
    expect(error.message).toMatch(problem);
    expect(error.message).not.toContain("pa55");
    expect(bridge.counts().requests).toBe(before);
  });

  it("takes an http(s) URL with a host as a REST endpoint", () => {
    for (const url of ["https://eu1-x.upstash.io", "http://127.0.0.1:8079/", "https://h.example/base"])
      expect(restEndpointProblem(url), url).toBeUndefined();
  });

  it("rejects when the request's time budget runs out (an abort never resolves)", async () => {
    bridge.setMode("hang");
    try {
      const error = await rejection(client(TOKEN, 50).get("k"));
      expect(error.name).toBe("TimeoutError");
      const p = client(TOKEN, 50).pipeline();
      p.incr("k");
      expect((await rejection(p.exec() as Promise<unknown>)).name).toBe("TimeoutError");
    } finally {
      bridge.setMode("normal");
    }
  });

  it("is what a Store uses for a URL and token: a hung Redis is a StoreError timeout", async () => {
    const store = new StoreRegistry().store({
      name: "home",
      connection: { url: bridge.url, token: TOKEN },
      // a fixed budget long enough for the first call on a loaded machine: the hung one waits it out
      budget: 1_000,
    });
    expect(await store.run(store.script("return ARGV[1]"), [], ["x"])).toBe("x");
    bridge.setMode("hang");
    try {
      const error = await rejection(store.keys.get("k"));
      expect(error).toBeInstanceOf(StoreError);
      expect((error as StoreError).reason).toBe("timeout");
    } finally {
      bridge.setMode("normal");
    }
  });
});

describe("a caller's own @upstash/redis client", () => {
  it("is a RedisClient as it is (both entries), and a Store uses it as given", async () => {
    const cloudflare: RedisClient = new CloudflareRedis({ url: bridge.url, token: TOKEN, enableTelemetry: false });
    const own: RedisClient = new Redis({ url: bridge.url, token: TOKEN, enableTelemetry: false });
    expect(await cloudflare.ping()).toBe("PONG");
    const store = new StoreRegistry().store({ name: "home", connection: own, budget: 5_000 });
    expect(await store.keys.set("rc:own", "v", { ex: 60 })).toBe(true);
    expect(await store.keys.get("rc:own")).toBe("v");
    expect(await store.pipeline((b) => b.incr("rc:own-n").hgetall("rc:own-h"))).toEqual([1, null]);
    expect(await store.run(store.script("return 7"), [], [])).toBe(7);
  });
});
