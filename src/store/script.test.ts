import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { runScript, Script, type ScriptSender } from "./script.js";
import { StoreRegistry } from "./redis.js";

const SOURCE = "#!lua flags=allow-key-locking\nreturn ARGV[1]";
const sha1 = (text: string) => createHash("sha1").update(text, "utf8").digest("hex");

/** A fake database behind a sender: remembers which scripts it holds, records what was sent. */
function fakeDatabase() {
  const held = new Set<string>();
  const sent: string[] = [];
  let pending: Array<() => void> = [];
  let paused = false;
  const gate = () => (paused ? new Promise<void>((resolve) => pending.push(resolve)) : Promise.resolve());
  const evalAs = (name: string) => async (source: string, _keys: string[], args: string[]) => {
    sent.push(name);
    await gate();
    held.add(sha1(source));
    return args[0];
  };
  const evalshaAs = (name: string) => async (sha: string, _keys: string[], args: string[]) => {
    sent.push(name);
    await gate();
    if (!held.has(sha)) throw new Error("NOSCRIPT No matching script. Please use EVAL.");
    return args[0];
  };
  const sender: ScriptSender = {
    eval: evalAs("eval"),
    evalsha: evalshaAs("evalsha"),
    evalRo: evalAs("eval_ro"),
    evalshaRo: evalshaAs("evalsha_ro"),
  };
  return {
    sender,
    sent,
    flush: () => held.clear(),
    pause: () => (paused = true),
    release: () => {
      paused = false;
      for (const go of pending) go();
      pending = [];
    },
  };
}

describe("runScript", () => {
  it("sends the body (EVAL) first, then only the SHA-1 (EVALSHA): one request per call, the first included", async () => {
    const db = fakeDatabase();
    const loaded = new Set<Script>();
    const script = new Script(SOURCE);
    expect(await runScript(db.sender, loaded, script, [], ["a"])).toBe("a");
    expect(await runScript(db.sender, loaded, script, [], ["b"])).toBe("b");
    expect(await runScript(db.sender, loaded, script, [], ["c"])).toBe("c");
    expect(db.sent).toEqual(["eval", "evalsha", "evalsha"]);
    expect(await script.sha()).toBe(sha1(SOURCE));
  });

  it("concurrent first calls each send one EVAL, never EVALSHA then EVAL", async () => {
    const db = fakeDatabase();
    const loaded = new Set<Script>();
    const script = new Script(SOURCE);
    db.pause();
    const calls = Array.from({ length: 20 }, (_, i) => runScript(db.sender, loaded, script, [], [String(i)]));
    db.release();
    expect(await Promise.all(calls)).toEqual(Array.from({ length: 20 }, (_, i) => String(i)));
    expect(db.sent).toEqual(Array(20).fill("eval"));
  });

  it("after NOSCRIPT (Redis flushed) sends the body once more, then goes back to EVALSHA", async () => {
    const db = fakeDatabase();
    const loaded = new Set<Script>();
    const script = new Script(SOURCE);
    await runScript(db.sender, loaded, script, [], ["a"]);
    db.flush();
    expect(await runScript(db.sender, loaded, script, [], ["b"])).toBe("b");
    expect(await runScript(db.sender, loaded, script, [], ["c"])).toBe("c");
    expect(db.sent).toEqual(["eval", "evalsha", "eval", "evalsha"]);
  });

  it("a caller that gave up does not follow NOSCRIPT with an EVAL nobody waits for; the script is cold again", async () => {
    const db = fakeDatabase();
    const loaded = new Set<Script>();
    const script = new Script(SOURCE);
    await runScript(db.sender, loaded, script, [], ["a"]);
    db.flush();
    await expect(runScript(db.sender, loaded, script, [], ["b"], () => true)).rejects.toThrow(/NOSCRIPT/);
    expect(loaded.has(script)).toBe(false);
    expect(db.sent).toEqual(["eval", "evalsha"]);
  });

  it("a failed EVAL leaves the script cold, and other errors pass through untouched", async () => {
    const loaded = new Set<Script>();
    const script = new Script(SOURCE);
    const failing: ScriptSender = {
      eval: () => Promise.reject(new Error("ERR user_script:1: boom")),
      evalsha: () => Promise.reject(new Error("unexpected")),
      evalRo: () => Promise.reject(new Error("unexpected")),
      evalshaRo: () => Promise.reject(new Error("unexpected")),
    };
    await expect(runScript(failing, loaded, script, [], [])).rejects.toThrow(/boom/);
    expect(loaded.size).toBe(0);
  });

  it("sends a script flagged no-writes read-only (EVAL_RO, then EVALSHA_RO), and others as usual", async () => {
    const db = fakeDatabase();
    const loaded = new Set<Script>();
    const readOnly = new Script("#!lua flags=no-writes,allow-key-locking\nreturn ARGV[1]");
    expect([readOnly.readOnly, new Script(SOURCE).readOnly]).toEqual([true, false]);
    expect(await runScript(db.sender, loaded, readOnly, [], ["a"])).toBe("a");
    expect(await runScript(db.sender, loaded, readOnly, [], ["b"])).toBe("b");
    expect(db.sent).toEqual(["eval_ro", "evalsha_ro"]);
  });

  it("keeps one Script per source text in an isolate", () => {
    const registry = new StoreRegistry();
    expect(registry.script(SOURCE)).toBe(registry.script(SOURCE));
    expect(registry.script(SOURCE)).not.toBe(registry.script(`${SOURCE}\n`));
    // another runtime's registry has its own
    expect(new StoreRegistry().script(SOURCE)).not.toBe(registry.script(SOURCE));
  });
});
