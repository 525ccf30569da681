import { describe, expect, it } from "vitest";
import { StoreError } from "./deadline.js";
import { StoreRegistry, type RedisConnection } from "./redis.js";

type Mode = "ok" | "hang" | "unreachable" | "error reply";

/** A client standing in for `@upstash/redis`: answers, hangs, cannot connect or answers an error, as told; counts requests. */
function fakeClient(values: Record<string, unknown> = {}) {
  const state = { mode: "ok" as Mode, requests: 0, pipelined: [] as string[][] };
  const answer = async <T>(reply: T): Promise<T> => {
    state.requests++;
    if (state.mode === "hang") return new Promise<T>(() => undefined);
    if (state.mode === "unreachable") throw new TypeError("fetch failed");
    if (state.mode === "error reply")
      throw Object.assign(new Error("WRONGTYPE Operation against a key"), { name: "UpstashError" });
    return reply;
  };
  const pipeline = () => {
    const queued: string[][] = [];
    return new Proxy(
      {},
      {
        get: (_, op: string) =>
          op === "length"
            ? () => queued.length
            : op === "exec"
              ? () => {
                  state.pipelined.push(queued.map((c) => c.join(" ")));
                  return answer(queued.map((c) => c[0]));
                }
              : (...args: unknown[]) => queued.push([op, ...args.map(String)]),
      },
    );
  };
  const client = {
    eval: () => answer(null),
    get: (key: string) => answer(values[key] ?? null),
    set: () => answer("OK"),
    hgetall: () => answer(["f", "v"]),
    ping: () => answer("PONG"),
    pipeline,
  };
  return { state, connection: client as unknown as RedisConnection };
}

const DECISION = { floorMs: 30, ceilingMs: 30 };

async function failure(p: Promise<unknown>): Promise<StoreError> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(StoreError);
  return e as StoreError;
}

describe("Store's typed commands", () => {
  it("go through the decision store's circuit: once decisions opened it, a command is refused without a request", async () => {
    const db = fakeClient();
    const store = new StoreRegistry().store({ name: "home", connection: db.connection, budget: DECISION });
    db.state.mode = "unreachable";
    for (let i = 0; i < 3; i++)
      expect((await failure(store.run(store.script("return 1"), [], []))).reason).toBe("unreachable");
    expect((await failure(store.hash.getAll("h"))).reason).toBe("circuit_open");
    expect(db.state.requests).toBe(3);
  });

  it("are bounded by the store's deadline: a hung Redis is a StoreError timeout, not a wait", async () => {
    const db = fakeClient();
    const store = new StoreRegistry().store({ name: "home", connection: db.connection, budget: 30 });
    db.state.mode = "hang";
    const started = Date.now();
    expect((await failure(store.ping())).reason).toBe("timeout");
    expect((await failure(store.pipeline((b) => b.incr("k")))).reason).toBe("timeout");
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("never open the circuit decisions share, whether they time out or cannot reach the database", async () => {
    const db = fakeClient();
    const registry = new StoreRegistry();
    const admin = registry.store({ name: "home", connection: db.connection, budget: 30 });
    const decision = registry.store({ name: "home", connection: db.connection, budget: DECISION });
    db.state.mode = "hang";
    for (let i = 0; i < 5; i++) expect((await failure(admin.keys.get("k"))).reason).toBe("timeout");
    db.state.mode = "unreachable";
    for (let i = 0; i < 5; i++) expect((await failure(admin.keys.get("k"))).reason).toBe("unreachable");
    for (let i = 0; i < 5; i++) expect((await failure(decision.keys.get("k"))).reason).toBe("unreachable");
    db.state.mode = "ok";
    const before = db.state.requests;
    expect(await decision.run(decision.script("return 1"), [], [])).toBeNull();
    expect(db.state.requests).toBe(before + 1);
  });

  it("a command that fails as the circuit's probe reopens it: decisions are not left waiting for a lost probe", async () => {
    const db = fakeClient();
    const store = new StoreRegistry().store({ name: "home", connection: db.connection, budget: DECISION });
    db.state.mode = "unreachable";
    for (let i = 0; i < 3; i++) await failure(store.run(store.script("return 1"), [], []));
    await new Promise((r) => setTimeout(r, 300)); // past the first open period (250 ms)
    expect((await failure(store.keys.get("k"))).reason).toBe("unreachable"); // the probe
    expect((await failure(store.keys.get("k"))).reason).toBe("circuit_open"); // reopened, for 500 ms
    db.state.mode = "ok";
    await new Promise((r) => setTimeout(r, 600));
    expect(await store.run(store.script("return 1"), [], [])).toBeNull(); // the next probe, well before 15 s
  });

  it("off the request path are never refused, and their answer closes a circuit decisions opened", async () => {
    const db = fakeClient();
    const registry = new StoreRegistry();
    const admin = registry.store({ name: "home", connection: db.connection, budget: 30 });
    const decision = registry.store({ name: "home", connection: db.connection, budget: DECISION });
    db.state.mode = "unreachable";
    for (let i = 0; i < 3; i++) await failure(decision.run(decision.script("return 1"), [], []));
    expect((await failure(decision.keys.get("k"))).reason).toBe("circuit_open");
    db.state.mode = "ok";
    await admin.ping();
    expect(await decision.keys.get("k")).toBeNull();
  });

  it("an error reply is a StoreError with reason error, and an answer: the circuit stays closed", async () => {
    const db = fakeClient();
    const store = new StoreRegistry().store({ name: "home", connection: db.connection, budget: DECISION });
    db.state.mode = "error reply";
    for (let i = 0; i < 5; i++) expect((await failure(store.hash.getAll("h"))).reason).toBe("error");
    db.state.mode = "ok";
    expect(await store.hash.getAll("h")).toEqual({ f: "v" });
  });

  it("a pipeline is one request with the batch's commands in order; an empty batch sends nothing", async () => {
    const db = fakeClient();
    const store = new StoreRegistry().store({ name: "home", connection: db.connection, budget: 1_000 });
    expect(await store.pipeline((b) => b.incr("k").pexpire("k", 500, true).hget("h", "f"))).toEqual([
      "incr",
      "pexpire",
      "hget",
    ]);
    expect(db.state.pipelined).toEqual([["incr k", "pexpire k 500 NX", "hget h f"]]);
    expect(await store.pipeline(() => undefined)).toEqual([]);
    expect(db.state.requests).toBe(1);
  });

  it("GET gives text, whatever a caller's own client deserialised", async () => {
    const db = fakeClient({ n: 42, o: { a: 1 }, s: "x" });
    const store = new StoreRegistry().store({ name: "home", connection: db.connection, budget: 1_000 });
    expect([await store.keys.get("n"), await store.keys.get("o"), await store.keys.get("s")]).toEqual([
      "42",
      '{"a":1}',
      "x",
    ]);
  });
});
