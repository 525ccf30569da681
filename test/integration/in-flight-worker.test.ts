import { createServer, request as httpRequest, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Miniflare } from "miniflare";
import { describe, expect, it } from "vitest";
import { loadConfig, type Config, type Limit } from "../../src/config/index.js";
import { keyedBuckets } from "../../src/features/rate-limit/decision/buckets.js";
import { scriptCall } from "../../src/features/rate-limit/decision/decision.js";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack } from "./stack.js";

/*
 * In-flight caps end to end: three Worker instances (three isolates, as three edge locations)
 * against one Redis, in front of an origin that counts the requests it is serving at once. A slot
 * is taken in the decision and freed when the response has been delivered, when the client goes
 * away mid-body, or, for one never released, when its lease runs out.
 */

const HOLD_MS = 200;
const KEY = "header:x-api-key";

const SLUICE: SluiceInput = {
  // a decision under a loaded machine is still Redis's (not a degraded, local one)
  timeout_ms: 10_000,
  routes: [
    {
      name: "tools",
      match: "/tools/*",
      limits: [{ name: "db", key: KEY, algorithm: "concurrency", limit: 3, lease: "30s" }],
    },
    {
      name: "stream",
      match: "/stream",
      limits: [{ name: "one", key: KEY, algorithm: "concurrency", limit: 1, lease: "30s" }],
    },
    {
      name: "orphan",
      match: "/orphan",
      limits: [{ name: "one", key: KEY, algorithm: "concurrency", limit: 1, lease: "2s" }],
    },
    {
      name: "agent",
      match: "/agent",
      limits: [
        // a token bucket: four an hour whatever the clock says (a fixed window starts again on the
        // hour, and a run across it would count twice)
        { name: "per-hour", key: KEY, rate: 4, period: "1h", burst: 4, lease: false },
        { name: "in-flight", key: KEY, algorithm: "concurrency", limit: 2, lease: "30s" },
      ],
    },
  ],
};

/** An origin that holds each request HOLD_MS (or streams /stream until the client goes), counting those in progress. */
interface CountingOrigin {
  url: string;
  /** The most requests it was serving at once, per path. */
  maxInFlight: Map<string, number>;
  /** Requests it started, per path. */
  served: Map<string, number>;
  /** /stream responses that ended because the other side went away. */
  streamsCut: number;
  close(): Promise<void>;
}

async function startCountingOrigin(): Promise<CountingOrigin> {
  const now = new Map<string, number>();
  const origin: Omit<CountingOrigin, "url" | "close"> = { maxInFlight: new Map(), served: new Map(), streamsCut: 0 };
  const bump = (path: string, by: number) => {
    const n = (now.get(path) ?? 0) + by;
    now.set(path, n);
    origin.maxInFlight.set(path, Math.max(origin.maxInFlight.get(path) ?? 0, n));
  };
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://o").pathname;
    origin.served.set(path, (origin.served.get(path) ?? 0) + 1);
    bump(path, 1);
    let open = true;
    const done = () => open && ((open = false), bump(path, -1));
    res.on("close", done);
    if (path === "/stream") return streamTicks(res, () => (origin.streamsCut++, done()));
    setTimeout(() => res.end("ok"), HOLD_MS);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return Object.assign(origin, {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))),
  }) as CountingOrigin;
}

/** A tick every 50 ms for up to 20 s; `cut` when the reader went away before the end. */
function streamTicks(res: ServerResponse, cut: () => void): void {
  res.writeHead(200, { "content-type": "text/plain" });
  let n = 0;
  const timer = setInterval(() => {
    if (++n > 400) return (clearInterval(timer), res.end("end\n"));
    res.write(`tick ${n}\n`);
  }, 50);
  res.on("close", () => {
    clearInterval(timer);
    if (!res.writableEnded) cut();
  });
}

const rig = useStack({ sluice: SLUICE, instances: 3, origin: startCountingOrigin });
const worker = (i: number) => rig.workers[i % 3] as Miniflare;
const asKey = (key: string) => ({ headers: { "x-api-key": key } });

/** The Redis key of a limit's bucket for an API key, as the Worker computes it (the home region). */
async function bucketOf(route: string, apiKey: string, limit: string): Promise<{ limit: Limit; key: string }> {
  const loaded = loadConfig({ ORIGIN_URL: "https://o.example", SLUICE });
  if (!loaded.ok) throw loaded.error;
  const config: Config = loaded.config;
  const r = config.routes.find((x) => x.name === route);
  if (!r) throw new Error(route);
  const url = new URL(`http://sluice.test/${route}`);
  const facts = { ip: "203.0.113.1", matchPath: url.pathname, headers: new Headers({ "x-api-key": apiKey }), url };
  const b = (await keyedBuckets(r, facts, config, "home")).find((x) => x.limit.name === limit);
  if (!b) throw new Error(limit);
  return { limit: b.limit, key: b.key };
}

/** Retries `probe` until it returns true or `ms` pass; how long it took (ms), or undefined. */
async function within(ms: number, probe: () => Promise<boolean>): Promise<number | undefined> {
  const start = Date.now();
  while (Date.now() - start < ms) {
    if (await probe()) return Date.now() - start;
    await sleep(50);
  }
  return undefined;
}

describe("in-flight caps (algorithm = concurrency)", () => {
  it("30 concurrent requests of one key, limit 3, three instances: the origin never serves more than 3 at once", async () => {
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) => call(worker(i), "/tools/query", asKey("agent-1"))),
    );
    const statuses = results.map((r) => r.status);
    expect(rig.origin.maxInFlight.get("/tools/query")).toBeLessThanOrEqual(3);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(3);
    expect(statuses.filter((s) => s !== 200).every((s) => s === 429)).toBe(true);
    expect(statuses.filter((s) => s === 200)).toHaveLength(rig.origin.served.get("/tools/query") ?? 0);
    const refused = results.find((r) => r.status === 429);
    expect(refused?.json()).toMatchObject({ limit: "db" });
    // an honest upper bound: the slots held expire within the lease
    expect(Number(refused?.headers.get("retry-after"))).toBeLessThanOrEqual(30);
    const admitted = results.find((r) => r.status === 200);
    expect(admitted?.headers.get("ratelimit-policy")).toBe('"db";q=3;w=30');
    // every slot comes back once its response has been delivered: three at once pass again
    const { key } = await bucketOf("tools", "agent-1", "db");
    expect(await within(2_000, async () => (await rig.redis.exists(key)) === 0)).toBeDefined();
    const again = await Promise.all([0, 1, 2].map((i) => call(worker(i), "/tools/query", asKey("agent-1"))));
    expect(again.map((r) => r.status)).toEqual([200, 200, 200]);
    // another key has slots of its own
    expect((await call(worker(0), "/tools/query", asKey("agent-2"))).status).toBe(200);
  });

  it("30 clients of one key retrying every 20 ms: all get through, never more than 3 at the origin at once", async () => {
    const path = "/tools/churn";
    const started = Date.now();
    const tries = await Promise.all(
      Array.from({ length: 30 }, async (_, i) => {
        for (let n = 1; Date.now() - started < 20_000; n++) {
          const r = await call(worker(i + n), path, asKey("agent-3"));
          if (r.status === 200) return n;
          expect(r.status).toBe(429);
          await sleep(20);
        }
        return undefined;
      }),
    );
    expect(tries.every((n) => n !== undefined)).toBe(true);
    expect(rig.origin.served.get(path)).toBe(30);
    expect(rig.origin.maxInFlight.get(path)).toBe(3);
    // ten rounds of three, each held HOLD_MS at the origin
    expect(Date.now() - started).toBeGreaterThanOrEqual(10 * HOLD_MS);
  });

  it("a client that goes away mid-stream gives its slot back: the next request gets it", async () => {
    const mf = rig.worker({ sluice: SLUICE, listen: true });
    const base = await mf.ready;
    const first = await openStream(new URL("/stream", base), "streamer");
    // the slot is held while the body streams
    expect((await call(worker(1), "/stream", asKey("streamer"))).status).toBe(429);
    first.abort();
    // the stream had 20 s to go: a slot free within 5 s is the one the client gave back
    const took = await within(5_000, async () => {
      const next = await openStream(new URL("/stream", base), "streamer").catch(() => undefined);
      next?.abort();
      return next !== undefined;
    });
    expect(took, "a slot was free again after the client went away").toBeDefined();
    // the origin's streams were cut too (the Worker cancels what it was forwarding)
    expect(await within(2_000, async () => rig.origin.streamsCut >= 2)).toBeDefined();
  });

  it("a slot never released (an isolate gone mid-request) comes back when its lease expires", async () => {
    const { limit, key } = await bucketOf("orphan", "crashed", "one");
    const take = scriptCall([{ limit, key, slot: "crashed-isolate" }], "take");
    const script = (await import("node:fs")).readFileSync("lua/decide.lua", "utf8");
    const reply = (await rig.redis.eval(script, take.keys, take.args)) as number[];
    expect(reply.slice(0, 3)).toEqual([1, 1, 0]);
    const refused = await call(worker(0), "/orphan", asKey("crashed"));
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get("retry-after"))).toBeLessThanOrEqual(2);
    const freedAfter = await within(
      4_000,
      async () => (await call(worker(1), "/orphan", asKey("crashed"))).status === 200,
    );
    expect(freedAfter).toBeDefined();
    expect(freedAfter as number).toBeGreaterThan(1_000);
  });

  it("with a rate limit in the same route, all or nothing: a refusal by either takes nothing of the other", async () => {
    const k = asKey("agent-9");
    // two in flight take both slots (and two of the four an hour); a third is refused by the slots
    const pending = [call(worker(0), "/agent", k), call(worker(1), "/agent", k)];
    await sleep(HOLD_MS / 2);
    const bySlots = await call(worker(2), "/agent", k);
    expect(bySlots.status).toBe(429);
    expect(bySlots.json()).toMatchObject({ limit: "in-flight" });
    expect((await Promise.all(pending)).map((r) => r.status)).toEqual([200, 200]);
    // the refused one took no token: two more of the four pass, one after the other
    const { key: slotsKey } = await bucketOf("agent", "agent-9", "in-flight");
    for (const i of [0, 1]) {
      await within(2_000, async () => (await rig.redis.exists(slotsKey)) === 0);
      expect((await call(worker(i), "/agent", k)).status).toBe(200);
    }
    await within(2_000, async () => (await rig.redis.exists(slotsKey)) === 0);
    const byRate = await call(worker(2), "/agent", k);
    expect(byRate.status).toBe(429);
    expect(byRate.json()).toMatchObject({ limit: "per-hour" });
    // and the rate limit's refusal took no slot
    expect(await rig.redis.exists(slotsKey)).toBe(0);
    expect(rig.origin.maxInFlight.get("/agent")).toBeLessThanOrEqual(2);
  });
});

/** A GET of /stream over a real socket: resolves once the first chunk arrived; `abort()` drops the connection. */
function openStream(url: URL, apiKey: string): Promise<{ abort(): void }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers: { "x-api-key": apiKey, "cf-connecting-ip": "203.0.113.7" } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`status ${res.statusCode}`));
      res.once("data", () => resolve({ abort: () => req.destroy() }));
    });
    req.on("error", () => undefined);
    req.end();
  });
}
