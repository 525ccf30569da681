/**
 * The bridge driven by the real @upstash/redis client (and by raw fetch where the wire itself is
 * the point), in front of a real redis-server spawned for this file.
 */
import { createHash, randomUUID } from "node:crypto";
import { Redis, type RedisConfigNodejs } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type Bridge, startBridge } from "./bridge.js";
import { type RedisProcess, startRedis } from "./redis-process.js";
import { replyToJs, RespClient } from "./resp.js";

const TOKEN = "bridge-test-token";
let redisProcess: RedisProcess;
let bridge: Bridge;
/** Straight to Redis over RESP, to check what the bridge really stored. */
let direct: RespClient;

beforeAll(async () => {
  redisProcess = await startRedis();
  bridge = await startBridge({ redisUrl: redisProcess.url, token: TOKEN });
  direct = RespClient.fromUrl(redisProcess.url);
});

afterAll(async () => {
  direct?.close();
  await bridge?.close();
  await redisProcess?.stop();
});

function client(options: Partial<RedisConfigNodejs> = {}, target: Bridge = bridge): Redis {
  return new Redis({ url: target.url, token: TOKEN, enableTelemetry: false, ...options });
}

async function raw(path: string, body: unknown, headers: Record<string, string> = {}, target: Bridge = bridge) {
  const res = await fetch(`${target.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, json: (await res.json()) as unknown };
}

async function directGet(key: string): Promise<unknown> {
  return replyToJs(await direct.send(["GET", key]));
}

/** Records every HTTP request the client makes (URL and JSON body), still letting it through. */
async function recordingFetches<T>(
  run: () => Promise<T>,
): Promise<{ value: T; calls: { path: string; body: unknown }[] }> {
  const calls: { path: string; body: unknown }[] = [];
  const realFetch = globalThis.fetch;
  const spy = vi.spyOn(globalThis, "fetch").mockImplementation((input, init) => {
    calls.push({ path: new URL(String(input)).pathname, body: JSON.parse(String(init?.body)) as unknown });
    return realFetch(input, init);
  });
  try {
    return { value: await run(), calls };
  } finally {
    spy.mockRestore();
  }
}

const key = (name: string) => `${name}:${randomUUID()}`;
const sha1 = (text: string) => createHash("sha1").update(text).digest("hex");

describe("commands through the real client", () => {
  it("round-trips set/get, auto-pipelined by default: concurrent commands share one /pipeline request", async () => {
    const redis = client();
    const [a, b, c] = [key("a"), key("b"), key("c")];
    const { value, calls } = await recordingFetches(() =>
      Promise.all([redis.set(a, "1st"), redis.set(b, "2nd"), redis.set(c, "3rd")]),
    );
    expect(value).toEqual(["OK", "OK", "OK"]);
    expect(calls).toEqual([
      {
        path: "/pipeline",
        body: [
          ["set", a, "1st"],
          ["set", b, "2nd"],
          ["set", c, "3rd"],
        ],
      },
    ]);
    expect(await redis.get(b)).toBe("2nd");
    expect(await directGet(c)).toBe("3rd");
  });

  it("serves single commands on / when auto-pipelining is off", async () => {
    const redis = client({ enableAutoPipelining: false });
    const k = key("single");
    const { value, calls } = await recordingFetches(async () => [
      await redis.set(k, "v", { ex: 100 }),
      await redis.get(k),
      await redis.ttl(k),
    ]);
    expect(value[0]).toBe("OK");
    expect(value[1]).toBe("v");
    expect(value[2]).toBeGreaterThan(90);
    expect(calls.map((call) => call.path)).toEqual(["/", "/", "/"]);
    expect(calls[0]?.body).toEqual(["set", k, "v", "ex", 100]);
  });

  it("returns a Redis error on / as HTTP 400, which the client throws", async () => {
    const k = key("str");
    await direct.send(["SET", k, "not a number"]);
    await expect(client({ enableAutoPipelining: false }).incr(k)).rejects.toThrow(/not an integer/);
    expect(await raw("/", ["incr", k])).toMatchObject({
      status: 400,
      json: { error: expect.stringMatching(/^ERR value is not an integer/) },
    });
  });

  it("runs an explicit pipeline, with Redis errors kept in their slots", async () => {
    const redis = client();
    const [s, n] = [key("s"), key("n")];
    const ok = await redis.pipeline().set(s, "x").incr(n).incr(n).get(s).exec();
    expect(ok).toEqual(["OK", 1, 2, "x"]);
    const withError = await redis.pipeline().incr(s).get(s).exec({ keepErrors: true });
    expect(withError[0]?.error).toMatch(/not an integer/);
    expect(withError[1]).toEqual({ error: undefined, result: "x" });
    await expect(redis.pipeline().incr(s).exec()).rejects.toThrow(/Command 1 \[ incr \] failed/);
  });

  it("runs redis.multi() as a real MULTI/EXEC on /multi-exec", async () => {
    const redis = client();
    const m = key("m");
    const multisBefore = await commandCalls("multi");
    const { value, calls } = await recordingFetches(() => redis.multi().set(m, 1).incr(m).get(m).exec());
    expect(value).toEqual(["OK", 2, 2]);
    expect(calls.map((call) => call.path)).toEqual(["/multi-exec"]);
    expect(await commandCalls("multi")).toBe(multisBefore + 1);
  });

  it("reports a runtime error inside a transaction in its slot, and a queueing error as EXECABORT", async () => {
    const t = key("t");
    const runtime = await raw("/multi-exec", [
      ["set", t, "x"],
      ["incr", t],
      ["get", t],
    ]);
    expect(runtime.status).toBe(200);
    expect(runtime.json).toEqual([
      { result: "OK" },
      { error: expect.stringMatching(/not an integer/) },
      { result: "x" },
    ]);
    const queued = await raw("/multi-exec", [["set", t, "y"], ["nosuchcommand"]]);
    expect(queued.json).toEqual([
      { error: expect.stringMatching(/^EXECABORT/) },
      { error: expect.stringMatching(/unknown command/) },
    ]);
    expect(await directGet(t)).toBe("x");
  });

  it("keeps MULTI…EXEC blocks contiguous under concurrent traffic on the shared connection", async () => {
    const redis = client();
    const counter = key("counter");
    const keys = Array.from({ length: 20 }, (_, i) => key(`tx${i}`));
    const transactions = keys.map((k, i) => redis.multi().set(k, i).incr(k).get(k).exec());
    const singles = keys.map(() => redis.incr(counter));
    const [txResults, counts] = await Promise.all([Promise.all(transactions), Promise.all(singles)]);
    expect(txResults).toEqual(keys.map((_, i) => ["OK", i + 1, i + 1]));
    expect([...counts].sort((x, y) => x - y)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
  });

  it("refuses commands that would change or block the shared connection", async () => {
    expect(await raw("/", ["MULTI"])).toMatchObject({
      status: 400,
      json: { error: expect.stringMatching(/not supported/) },
    });
    expect(await raw("/pipeline", [["select", 1]])).toMatchObject({ status: 400 });
    expect(await raw("/", ["blpop", "x", 0])).toMatchObject({ status: 400 });
    // The connection is still in its normal state: a plain command answers normally.
    expect(await raw("/", ["ping"])).toMatchObject({ status: 200, json: { result: "PONG" } });
  });
});

describe("response encoding", () => {
  it("base64-encodes every string at every depth, statuses included, and nothing else", async () => {
    const [k, list] = [key("k"), key("list")];
    expect(await raw("/", ["set", k, "v"], { "Upstash-Encoding": "base64" })).toMatchObject({
      json: { result: "T0s=" },
    });
    await raw("/", ["rpush", list, "OK", "é"]);
    expect((await raw("/", ["lrange", list, 0, -1], { "Upstash-Encoding": "base64" })).json).toEqual({
      result: ["T0s=", "w6k="],
    });
    const lua = await raw("/", ["eval", "return {'OK', 1, {'x', false}, redis.status_reply('QUEUED')}", 0], {
      "Upstash-Encoding": "base64",
    });
    expect(lua.json).toEqual({ result: ["T0s=", 1, ["eA==", null], "UVVFVUVE"] });
    const bytes = await raw("/", ["eval", "return string.char(255, 0, 1)", 0], { "Upstash-Encoding": "base64" });
    expect(bytes.json).toEqual({ result: Buffer.from([255, 0, 1]).toString("base64") });
    const errors = await raw("/pipeline", [["incr", list]], { "Upstash-Encoding": "base64" });
    expect(errors.json).toEqual([{ error: "WRONGTYPE Operation against a key holding the wrong kind of value" }]);
  });

  it("lets the client decode lrange, hgetall, mget with nils and a script's {'OK', 1, 'x'}", async () => {
    const redis = client();
    const [list, hash, a] = [key("list"), key("hash"), key("a")];
    await redis.rpush(list, "a", "OK", "🚦");
    expect(await redis.lrange(list, 0, -1)).toEqual(["a", "OK", "🚦"]);
    await redis.hset(hash, { name: "sluice", status: "OK" });
    expect(await redis.hgetall(hash)).toEqual({ name: "sluice", status: "OK" });
    await redis.set(a, "x");
    expect(await redis.mget(a, key("missing"), a)).toEqual(["x", null, "x"]);
    expect(await redis.eval("return {'OK', 1, 'x'}", [], [])).toEqual(["OK", 1, "x"]);
  });

  it("sends plain UTF-8 text when the client turns encoding off", async () => {
    const redis = client({ responseEncoding: false });
    const [k, list] = [key("k"), key("list")];
    expect(await redis.set(k, "héllo 🚦")).toBe("OK");
    expect(await redis.get(k)).toBe("héllo 🚦");
    await redis.rpush(list, "OK", "x");
    expect(await redis.lrange(list, 0, -1)).toEqual(["OK", "x"]);
    expect((await raw("/", ["lrange", list, 0, -1])).json).toEqual({ result: ["OK", "x"] });
  });

  it("stores strings byte for byte and returns what the client really makes of them", async () => {
    const redis = client();
    const cases: [string, unknown][] = [
      ["🚦 sluice", "🚦 sluice"],
      ["nul\u0000byte", "nul\u0000byte"],
      ["123", 123], // the client JSON-parses strings that look like JSON
      ['{"a":1}', { a: 1 }],
      ["007", "007"], // ...but only when the number prints back the same
    ];
    for (const [value, expected] of cases) {
      const k = key("s");
      await redis.set(k, value);
      expect(await directGet(k)).toBe(value);
      expect(await redis.get(k)).toEqual(expected);
    }
  });

  it("turns numbers into their decimal text and booleans into true/false, and refuses null", async () => {
    const redis = client();
    const [f, b] = [key("f"), key("b")];
    await redis.set(f, 1.5);
    await redis.set(b, true);
    expect(await directGet(f)).toBe("1.5");
    expect(await directGet(b)).toBe("true");
    expect(await redis.get(b)).toBe(true);
    expect(await raw("/", ["set", key("n"), null])).toMatchObject({ status: 400 });
  });
});

describe("scripts", () => {
  it("runs createScript().exec(), then recovers from SCRIPT FLUSH through NOSCRIPT → EVAL", async () => {
    const redis = client();
    const script = redis.createScript<string>(`-- ${randomUUID()}\nreturn ARGV[1]`);
    const first = await recordingFetches(() => script.exec([], ["hello"]));
    expect(first.value).toBe("hello");
    expect(commandNames(first.calls)).toEqual(["evalsha", "eval"]);
    const cached = await recordingFetches(() => script.exec([], ["again"]));
    expect(cached.value).toBe("again");
    expect(commandNames(cached.calls)).toEqual(["evalsha"]);
    expect(replyToJs(await direct.send(["SCRIPT", "FLUSH"]))).toBe("OK");
    const afterFlush = await recordingFetches(() => script.exec([], ["back"]));
    expect(afterFlush.value).toBe("back");
    expect(commandNames(afterFlush.calls)).toEqual(["evalsha", "eval"]);
  });

  it("answers an EVALSHA of an unknown SHA with a NOSCRIPT error", async () => {
    const unknown = sha1(randomUUID());
    expect(await raw("/", ["evalsha", unknown, 0])).toMatchObject({
      status: 400,
      json: { error: expect.stringMatching(/^NOSCRIPT/) },
    });
    expect((await raw("/pipeline", [["evalsha", unknown, 0]])).json).toEqual([
      { error: expect.stringMatching(/^NOSCRIPT/) },
    ]);
  });

  it("runs a script with Upstash's allow-key-locking shebang flag, under its original SHA", async () => {
    const source = `#!lua flags=allow-key-locking\n-- ${randomUUID()}\nredis.call('SET', KEYS[1], ARGV[1])\nreturn redis.call('GET', KEYS[1])`;
    const rejected = await direct.send(["EVAL", source, 1, key("k")]);
    expect(replyToJs(rejected)).toEqual({ error: expect.stringMatching(/Unexpected flag/) }); // why the bridge has to strip it
    const redis = client();
    const script = redis.createScript<string>(source);
    const k = key("locked");
    expect(await script.exec([k], ["v1"])).toBe("v1");
    const second = await recordingFetches(() => script.exec([k], ["v2"]));
    expect(second.value).toBe("v2");
    expect(second.calls).toEqual([{ path: "/pipeline", body: [["evalsha", sha1(source), 1, k, "v2"]] }]);
    expect(await redis.scriptLoad(source)).toBe(sha1(source));
    expect(await redis.scriptExists(sha1(source))).toEqual([1]);
    await direct.send(["SCRIPT", "FLUSH"]);
    expect(await script.exec([k], ["v3"])).toBe("v3");
    expect(await directGet(k)).toBe("v3");
  });
});

describe("scripts on a Redis that refuses TIME in scripts (scriptTime: refuse)", () => {
  /** A bridge of its own in refuse mode, on the file's Redis. */
  async function refusing(run: (b: Bridge) => Promise<void>): Promise<void> {
    const own = await startBridge({ redisUrl: redisProcess.url, token: TOKEN, scriptTime: "refuse" });
    try {
      await run(own);
    } finally {
      await own.close();
    }
  }
  const timed = () =>
    `#!lua flags=allow-key-locking\n-- ${randomUUID()}\nredis.call('SET', KEYS[1], 'before')\nlocal t = redis.call("time")\nreturn t[1]`;

  it("fails a script at its TIME call with ElastiCache Serverless's error, naming the SHA the client sent and the line", async () => {
    await refusing(async (b) => {
      const source = timed();
      const k = key("t");
      expect(await raw("/", ["eval", source, 1, k], {}, b)).toMatchObject({
        status: 400,
        json: {
          error: `ERR This Redis command is not allowed from script script: ${sha1(source)}, on @user_script:4.`,
        },
      });
      expect(await directGet(k)).toBe("before"); // what ran before the call stays done, as in Redis
      // the same through EVALSHA once the body is known, and through a pipeline
      expect((await raw("/pipeline", [["evalsha", sha1(source), 1, k]], {}, b)).json).toEqual([
        { error: expect.stringMatching(/not allowed from script script: [0-9a-f]{40}, on @user_script:4\.$/) },
      ]);
      // redis.pcall gets the refusal as an error reply, as in Redis
      const caught = `-- ${randomUUID()}\nlocal r = redis.pcall('TIME')\nreturn r.err`;
      expect((await raw("/", ["eval", caught, 0], {}, b)).json).toEqual({
        result: "ERR This Redis command is not allowed from script",
      });
    });
  });

  it("runs scripts that do not call TIME, and never the unrewritten copy of one that does", async () => {
    await refusing(async (b) => {
      expect((await raw("/", ["eval", `-- ${randomUUID()}\nreturn ARGV[1]`, 0, "x"], {}, b)).json).toEqual({
        result: "x",
      });
      // Redis holds the script as sent (another client loaded it): the refusing bridge still answers NOSCRIPT
      const source = timed();
      expect(
        replyToJs(await direct.send(["SCRIPT", "LOAD", source.replace("#!lua flags=allow-key-locking", "#!lua")])),
      ).toBeTypeOf("string");
      const plain = source.replace("#!lua flags=allow-key-locking", "#!lua");
      expect(await raw("/", ["evalsha", sha1(plain), 1, key("t")], {}, b)).toMatchObject({
        status: 400,
        json: { error: expect.stringMatching(/^NOSCRIPT/) },
      });
    });
  });

  it("switches from code and over HTTP at /__bridge/script-time; allowed again, TIME answers", async () => {
    await refusing(async (b) => {
      const source = timed();
      expect((await raw("/", ["eval", source, 1, key("t")], {}, b)).status).toBe(400);
      const res = await fetch(`${b.url}/__bridge/script-time`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify({ time: "allow" }),
      });
      expect(await res.json()).toEqual({ result: { time: "allow" } });
      expect(b.scriptTime).toBe("allow");
      // the client's EVALSHA meets NOSCRIPT (Redis holds only the rewritten copy), and its EVAL runs
      expect((await raw("/", ["evalsha", sha1(source), 1, key("t")], {}, b)).json).toEqual({
        error: expect.stringMatching(/^NOSCRIPT/),
      });
      const allowed = await raw("/", ["eval", source, 1, key("t")], {}, b);
      expect(allowed.status).toBe(200);
      expect(Number((allowed.json as { result: string }).result)).toBeGreaterThan(1_700_000_000);
      b.setScriptTime("refuse");
      expect((await raw("/", ["evalsha", sha1(source), 1, key("t")], {}, b)).status).toBe(400);
      for (const bad of [{ time: "sometimes" }, {}, { time: "allow", extra: 1 }]) {
        const refused = await fetch(`${b.url}/__bridge/script-time`, {
          method: "POST",
          headers: { authorization: `Bearer ${TOKEN}` },
          body: JSON.stringify(bad),
        });
        expect(refused.status, JSON.stringify(bad)).toBe(400);
      }
      expect(() => b.setScriptTime("never" as "allow")).toThrow(RangeError);
    });
  });
});

describe("HTTP behaviour", () => {
  it("rejects a wrong or missing token with 401 Unauthorized", async () => {
    await expect(new Redis({ url: bridge.url, token: "wrong", enableTelemetry: false }).get("k")).rejects.toThrow(
      /Unauthorized/,
    );
    expect(await raw("/", ["get", "k"], { authorization: "Bearer wrong" })).toEqual(
      expect.objectContaining({ status: 401, json: { error: "Unauthorized" } }),
    );
    expect(await raw("/", ["get", "k"], { authorization: `Bearer ${TOKEN}x` })).toMatchObject({ status: 401 });
    const missing = await fetch(bridge.url, { method: "POST", body: '["get","k"]' });
    expect(missing.status).toBe(401);
    expect(await missing.json()).toEqual({ error: "Unauthorized" });
  });

  it("answers malformed bodies and wrong shapes with a JSON 400", async () => {
    for (const [path, body] of [
      ["/", "{not json"],
      ["/", { command: "get" }],
      ["/", []],
      ["/", ["get", ["nested"]]],
      ["/pipeline", []],
      ["/pipeline", ["get", "k"]],
      ["/multi-exec", [["get", "k"], "set"]],
    ] as const) {
      const res = await raw(path, body);
      expect(res.status, `${path} ${JSON.stringify(body)}`).toBe(400);
      expect(res.json).toEqual({ error: expect.stringMatching(/^ERR /) });
    }
  });

  it("answers non-POST with 405, unknown paths with 404 and oversized bodies with 413, in JSON", async () => {
    const get = await fetch(bridge.url, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(get.status).toBe(405);
    expect(await get.json()).toEqual({ error: expect.any(String) });
    expect(await raw("/nope", ["get", "k"])).toMatchObject({ status: 404, json: { error: expect.any(String) } });
    const huge = JSON.stringify(["set", key("big"), "x".repeat(11 * 1024 * 1024)]);
    expect(await raw("/", huge)).toMatchObject({
      status: 413,
      json: { error: expect.stringMatching(/too large|larger/) },
    });
  });

  it("sends an upstash-sync-token that moves on writes", async () => {
    const k = key("sync");
    const one = await raw("/", ["set", k, "1"]);
    const two = await raw("/", ["set", k, "2"]);
    expect(one.headers.get("upstash-sync-token")).toBeTruthy();
    expect(two.headers.get("upstash-sync-token")).not.toBe(one.headers.get("upstash-sync-token"));
    expect(bridge.requests).toBeGreaterThan(0);
  });

  it("delays every response by the configured latency", async () => {
    const slow = await startBridge({ redisUrl: redisProcess.url, token: TOKEN, latencyMs: 120 });
    try {
      let started = performance.now();
      expect((await raw("/", ["ping"], {}, slow)).status).toBe(200);
      expect(performance.now() - started).toBeGreaterThanOrEqual(120);
      slow.setLatency(250);
      started = performance.now();
      expect(await client({}, slow).get(key("absent"))).toBeNull();
      expect(performance.now() - started).toBeGreaterThanOrEqual(250);
    } finally {
      await slow.close();
    }
  });
});

describe("fault switch and counters", () => {
  /** A bridge of its own, so its faults and counters touch no other test. */
  async function withBridge(run: (b: Bridge) => Promise<void>): Promise<void> {
    const own = await startBridge({ redisUrl: redisProcess.url, token: TOKEN });
    try {
      await run(own);
    } finally {
      await own.close();
    }
  }

  async function control(b: Bridge, what: string, body?: unknown, token = TOKEN) {
    const res = await fetch(`${b.url}/__bridge/${what}`, {
      method: body === undefined ? "GET" : "POST",
      headers: { authorization: `Bearer ${token}` },
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as unknown };
  }

  it("dropNext loses the next requests a rule matches, before Redis runs them or after, then lets them through", async () => {
    await withBridge(async (b) => {
      const [lost, ran] = [key("lost"), key("ran")];
      const reset = (body: unknown) =>
        fetch(`${b.url}/`, {
          method: "POST",
          headers: { authorization: `Bearer ${TOKEN}` },
          body: JSON.stringify(body),
        }).then(
          () => "answered",
          () => "reset",
        );
      b.dropNext({ match: (c) => c[0] === "set" && c[1] === lost });
      b.dropNext({ match: (c) => c[0] === "set" && c[1] === ran, when: "after" });
      expect(await raw("/", ["set", key("other"), "1"], {}, b)).toMatchObject({ status: 200 });
      expect(await reset(["set", lost, "1"])).toBe("reset");
      expect(await directGet(lost)).toBeNull(); // lost on its way: never ran
      expect(await reset(["set", ran, "1"])).toBe("reset");
      expect(await directGet(ran)).toBe("1"); // ran, its reply lost
      // each rule was used up by its one match
      expect(await raw("/", ["set", lost, "2"], {}, b)).toMatchObject({ status: 200 });
      expect(await directGet(lost)).toBe("2");
    });
  });

  it("counts HTTP requests and the commands they carried, per name; the switch itself is not counted", async () => {
    await withBridge(async (b) => {
      const [k1, k2] = [key("c1"), key("c2")];
      await raw(
        "/pipeline",
        [
          ["set", k1, "1"],
          ["set", k2, "2"],
          ["get", k1],
        ],
        {},
        b,
      );
      await raw("/", ["get", k2], {}, b);
      await control(b, "delay");
      await control(b, "counts");
      expect(b.counts()).toEqual({
        requests: 2,
        refused: 0,
        hung: 0,
        commands: { set: 2, get: 2 },
        requestsWith: { set: 1, get: 2 },
        scripts: {},
      });
      expect(b.requests).toBe(2);
      expect(await control(b, "counts")).toEqual({ status: 200, json: { result: b.counts() } });
      // a snapshot does not move with the bridge
      const before = b.counts();
      await client({}, b).incr(key("n"));
      expect(before.requests).toBe(2);
      expect(b.counts().commands.incr).toBe(1);
      // script calls by their first argument (decide.lua's mode), whatever their keys
      await raw("/", ["eval", "return ARGV[1]", 1, k1, "take", "x"], {}, b);
      await raw(
        "/pipeline",
        [
          ["eval", "return ARGV[1]", 0, "lease"],
          ["eval", "return 1", 2, k1, k2, "take"],
        ],
        {},
        b,
      );
      expect(b.counts().scripts).toEqual({ take: 2, lease: 1 });
    });
  });

  it("sets the latency from code and over HTTP, and refuses bad switches with a JSON 400 or 401", async () => {
    await withBridge(async (b) => {
      expect(await control(b, "delay", { ms: 150 })).toEqual({
        status: 200,
        json: { result: { mode: "normal", ms: 150 } },
      });
      expect(b.fault).toEqual({ mode: "normal", latencyMs: 150 });
      const started = performance.now();
      expect((await raw("/", ["ping"], {}, b)).status).toBe(200);
      expect(performance.now() - started).toBeGreaterThanOrEqual(150);
      b.setLatency(0);
      expect(await control(b, "delay")).toEqual({ status: 200, json: { result: { mode: "normal", ms: 0 } } });
      expect(() => b.setLatency(-1)).toThrow(RangeError);
      for (const bad of [
        { ms: -5 },
        { ms: 1.5 },
        { ms: "80" },
        { mode: "slow" },
        {},
        { ms: 1, extra: true },
        [80],
        "not json",
      ]) {
        const res = await control(b, "delay", bad);
        expect(res.status, JSON.stringify(bad)).toBe(400);
        expect(res.json).toEqual({ error: expect.stringMatching(/^ERR /) });
      }
      expect((await control(b, "delay", { ms: 80 }, "wrong")).status).toBe(401);
      expect((await control(b, "nope")).status).toBe(404);
      expect(b.fault).toEqual({ mode: "normal", latencyMs: 0 }); // nothing a refused switch said was applied
    });
  });

  it("hang: reads and counts each request, runs nothing, answers nothing; back to normal drops the parked ones", async () => {
    await withBridge(async (b) => {
      expect(await control(b, "delay", { mode: "hang" })).toMatchObject({
        status: 200,
        json: { result: { mode: "hang" } },
      });
      const k = key("hung");
      // the client gives up once the bridge has the request (however long a loaded machine takes to get it there)
      const giveUp = new AbortController();
      const hung = client({ retry: false, signal: () => giveUp.signal }, b).set(k, "v");
      await vi.waitFor(() => expect(b.counts().hung).toBe(1), { timeout: 10_000 });
      giveUp.abort();
      await expect(hung).rejects.toThrow(/abort/i);
      expect(await directGet(k)).toBeNull(); // never reached Redis
      expect(b.counts()).toMatchObject({ requests: 1, hung: 1, commands: { set: 1 } });

      // one left waiting without a timeout of its own: switching back drops it instead of answering late
      const waiting = raw("/", ["set", k, "late"], {}, b).then(
        () => "answered",
        () => "dropped",
      );
      await vi.waitFor(() => expect(b.counts().hung).toBe(2), { timeout: 10_000 });
      b.setMode("normal");
      expect(await waiting).toBe("dropped");
      expect(await directGet(k)).toBeNull();
      expect(await client({ retry: false }, b).set(k, "after")).toBe("OK");
      expect(await directGet(k)).toBe("after");
    });
  });

  it("refuse: every Redis request fails at once, unanswered; the switch still answers and brings it back", async () => {
    await withBridge(async (b) => {
      expect(await control(b, "delay", { mode: "refuse" })).toMatchObject({
        status: 200,
        json: { result: { mode: "refuse" } },
      });
      const k = key("refused");
      await expect(client({ retry: false }, b).set(k, "v")).rejects.toThrow();
      await expect(raw("/", ["get", k], {}, b)).rejects.toThrow(TypeError); // fetch failed: no HTTP answer at all
      // (undici may try a dropped request once more on a fresh connection: dropped again)
      const during = b.counts();
      expect(during.requests).toBeGreaterThanOrEqual(2);
      expect(during).toMatchObject({ refused: during.requests, hung: 0, commands: {} });
      expect(await directGet(k)).toBeNull();
      expect(await control(b, "delay", { mode: "normal" })).toMatchObject({
        status: 200,
        json: { result: { mode: "normal" } },
      });
      expect(await client({ retry: false }, b).set(k, "back")).toBe("OK");
      expect(b.counts()).toMatchObject({ requests: during.requests + 1, refused: during.refused });
    });
  });
});

describe("Redis outage", () => {
  it("answers 500 JSON while Redis is down, keeps serving, and recovers when it is back on the same port", async () => {
    const own = await startRedis();
    const outageBridge = await startBridge({ redisUrl: own.url, token: TOKEN });
    let restarted: RedisProcess | undefined;
    try {
      const redis = client({ retry: false }, outageBridge);
      expect(await redis.set("outage", "before")).toBe("OK");
      await own.stop();
      for (const body of [
        ["get", "outage"],
        ["set", "outage", "during"],
      ]) {
        const res = await raw("/", body, {}, outageBridge);
        expect(res.status).toBe(500);
        expect(res.json).toEqual({ error: expect.stringMatching(/ECONNREFUSED|closed/) });
      }
      expect((await raw("/pipeline", [["ping"]], {}, outageBridge)).status).toBe(500);
      await expect(redis.get("outage")).rejects.toThrow();
      restarted = await startRedis({ port: own.port });
      expect(restarted.port).toBe(own.port);
      expect(await redis.set("outage", "after")).toBe("OK");
      expect(await redis.get("outage")).toBe("after");
    } finally {
      await outageBridge.close();
      await restarted?.stop();
      await own.stop();
    }
  });
});

async function commandCalls(command: string): Promise<number> {
  const info = String(replyToJs(await direct.send(["INFO", "commandstats"])));
  return Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
}

/** The command names a recorded client call sent, flattened across pipelines. */
function commandNames(calls: { body: unknown }[]): string[] {
  return calls.flatMap(({ body }) => {
    const commands = Array.isArray(body) && Array.isArray(body[0]) ? (body as unknown[][]) : [body as unknown[]];
    return commands.map((command) => String(command[0]));
  });
}
