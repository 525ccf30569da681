import { afterEach, describe, expect, it, vi } from "vitest";
import { isTimeRefusal, ScriptClock, TIME_RETRY_MS } from "./clock.js";
import { runScript, Script, type ScriptSender } from "./script.js";

/** A script that reads TIME, and one that does not. */
const CLOCKED = "#!lua flags=allow-key-locking\nlocal t = redis.call('TIME')\nreturn ARGV[1]";
const PLAIN = "#!lua flags=allow-key-locking\nreturn ARGV[1]";
const REFUSAL =
  "ERR This Redis command is not allowed from script script: 53aa7d296ba9ded783301cc275161b6e344ad383, on @user_script:2.";

/**
 * A database that refuses TIME in scripts while `refusing`: a clocked script's call fails unless
 * its last argument is a passed clock. Records each request's last argument.
 */
function database(refusing = true) {
  const db = { refusing, lastArgs: [] as string[] };
  const run = async (source: string | undefined, args: string[]) => {
    db.lastArgs.push(args.at(-1) ?? "");
    const passed = /^clock:\d+$/.test(args.at(-1) ?? "");
    if (db.refusing && !passed && (source === undefined || source.includes("TIME"))) throw new Error(REFUSAL);
    return args[0];
  };
  const held = new Map<string, string>();
  const sender: ScriptSender = {
    eval: (source, _k, args) => run(source, args),
    evalRo: (source, _k, args) => run(source, args),
    evalsha: (sha, _k, args) => run(held.get(sha), args),
    evalshaRo: (sha, _k, args) => run(held.get(sha), args),
  };
  return { db, sender };
}

afterEach(() => {
  vi.useRealTimers();
});

describe("isTimeRefusal", () => {
  it("reads the refusals of TIME in scripts that Redis, Valkey and their hosts give", () => {
    for (const message of [
      REFUSAL, // Redis 7, ElastiCache Serverless
      "ERR Error running script (call to f_cb67b2f8): @user_script:1: @user_script: 1: This Redis command is not allowed from scripts", // before Redis 7
      "ERR This Valkey command is not allowed from script",
      "ERR Error running script (call to f_a49ed2fe): Write commands not allowed after non deterministic commands", // Redis 2.6 - 4
      "NOPERM User app has no permissions to run the 'time' command",
      "ERR The user executing the script can't run this command or subcommand script: 0123, on @user_script:1.",
      "ERR Unknown Redis command called from script script: 0123, on @user_script:1.", // a renamed TIME
    ])
      expect(isTimeRefusal(new Error(message)), message).toBe(true);
    for (const message of [
      "NOSCRIPT No matching script. Please use EVAL.",
      "WRONGTYPE Operation against a key holding the wrong kind of value",
      "ERR decide.lua: limit 1 (concurrency) needs a slot id",
      "The operation was aborted due to timeout",
      "fetch failed",
    ])
      expect(isTimeRefusal(new Error(message)), message).toBe(false);
  });
});

describe("runScript on a database that refuses TIME in scripts", () => {
  it("confirms the refusal with the same call on the isolate's clock, then passes it on every call, one request each", async () => {
    const { db, sender } = database();
    const clock = new ScriptClock();
    const line = { clock, store: "us" };
    const script = new Script(CLOCKED);
    expect(script.clocked).toBe(true);
    expect(await runScript(sender, new Set(), script, [], ["a"], undefined, line)).toBe("a");
    expect(db.lastArgs).toEqual(["a", expect.stringMatching(/^clock:\d+000$/)]);
    expect(clock.report()).toMatchObject({ mode: "isolate", refusal: REFUSAL });
    db.lastArgs.length = 0;
    const loaded = new Set<Script>();
    for (const arg of ["b", "c", "d"])
      expect(await runScript(sender, loaded, script, [], [arg], undefined, line)).toBe(arg);
    expect(db.lastArgs).toHaveLength(3);
    expect(db.lastArgs.every((a) => /^clock:\d+$/.test(a))).toBe(true);
  });

  it("passes no clock to a script that does not read TIME, nor while TIME is accepted", async () => {
    const { db, sender } = database(false);
    const clock = new ScriptClock();
    const line = { clock, store: "us" };
    expect(new Script(PLAIN).clocked).toBe(false);
    await runScript(sender, new Set(), new Script(PLAIN), [], ["a"], undefined, line);
    expect(clock.report()).toEqual({ mode: "unknown" });
    await runScript(sender, new Set(), new Script(CLOCKED), [], ["b"], undefined, line);
    expect(db.lastArgs).toEqual(["a", "b"]);
    expect(clock.report()).toEqual({ mode: "redis" });
  });

  it("an error that only looks like a refusal, refused on the isolate's clock too, switches nothing and is thrown", async () => {
    const clock = new ScriptClock();
    const sender: ScriptSender = {
      eval: () => Promise.reject(new Error(REFUSAL)),
      evalRo: () => Promise.reject(new Error(REFUSAL)),
      evalsha: () => Promise.reject(new Error(REFUSAL)),
      evalshaRo: () => Promise.reject(new Error(REFUSAL)),
    };
    await expect(
      runScript(sender, new Set(), new Script(CLOCKED), [], ["a"], undefined, { clock, store: "us" }),
    ).rejects.toThrow(/not allowed from script/);
    expect(clock.report()).toEqual({ mode: "unknown" });
  });

  it("tries TIME again with one call after TIME_RETRY_MS, and goes back to Redis's clock when it is accepted", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const { db, sender } = database();
    const clock = new ScriptClock();
    const line = { clock, store: "us" };
    const script = new Script(CLOCKED);
    const logs = vi.spyOn(console, "log").mockImplementation(() => undefined);
    await runScript(sender, new Set(), script, [], ["a"], undefined, line);
    expect(clock.report().mode).toBe("isolate");
    // still refused at the retry: one call tries TIME (and is sent again on the isolate's clock), the rest pass it
    vi.setSystemTime(Date.now() + TIME_RETRY_MS);
    db.lastArgs.length = 0;
    await Promise.all(["b", "c", "d"].map((arg) => runScript(sender, new Set(), script, [], [arg], undefined, line)));
    expect(db.lastArgs.filter((a) => !a.startsWith("clock:"))).toEqual(["b"]);
    expect(clock.report().mode).toBe("isolate");
    // accepted at the next retry: back on Redis's TIME, said once
    db.refusing = false;
    vi.setSystemTime(Date.now() + TIME_RETRY_MS);
    db.lastArgs.length = 0;
    await runScript(sender, new Set(), script, [], ["e"], undefined, line);
    await runScript(sender, new Set(), script, [], ["f"], undefined, line);
    expect(db.lastArgs).toEqual(["e", "f"]);
    expect(clock.report()).toEqual({ mode: "redis" });
    const switches = logs.mock.calls.map((c) => JSON.parse(String(c[0])) as Record<string, unknown>);
    expect(switches.map((l) => [l.event, l.clock])).toEqual([
      ["store_clock", "isolate"],
      ["store_clock", "redis"],
    ]);
    logs.mockRestore();
  });
});
