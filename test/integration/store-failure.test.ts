import type { Redis } from "@upstash/redis";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import { startRedis } from "@sluice/dev";
import { until } from "../support/pace.js";
import { call, commandCalls, startWorker, type DemoOrigin, type RedisStack, useStack } from "./stack.js";

const routes = [{ name: "r", match: "/*", limits: [{ name: "per-ip", rate: 1000, period: "1s" }] }];

const rig = useStack();
let stack: RedisStack;
let origin: DemoOrigin;
let open: Miniflare;
let closed: Miniflare;
let redis: Redis;

beforeAll(async () => {
  ({ stack, origin, redis } = rig);
  // max_timeout_ms = timeout_ms: a fixed budget (no adapting, the first call included), as these
  // tests need; a second, which a healthy Redis meets even on a loaded machine
  const fixed = { timeout_ms: 1_000, max_timeout_ms: 1_000 };
  open = rig.worker({ sluice: { ...fixed, on_store_error: "open", routes } });
  closed = rig.worker({ sluice: { ...fixed, on_store_error: "closed", routes } });
  await Promise.all([open.ready, closed.ready]);
});

async function scriptCalls(): Promise<{ evalsha: number; eval: number; http: number }> {
  const calls = await commandCalls(stack);
  // HTTP requests carrying the script: the isolate's off-path ones (its copy of the route's
  // overrides, refreshed every 0.8 s while the route is busy; lists; metrics) are not decisions
  const carrying = stack.bridge.counts().requestsWith;
  return { evalsha: calls.evalsha ?? 0, eval: calls.eval ?? 0, http: (carrying.evalsha ?? 0) + (carrying.eval ?? 0) };
}

describe("Redis round trips", () => {
  it("cost exactly one EVALSHA per decision in steady state, and recover from NOSCRIPT with one EVAL", async () => {
    expect((await call(open, "/warm")).headers.get("sluice-decision")).toBe("allow");
    const before = await scriptCalls();
    for (let i = 0; i < 20; i++) expect((await call(open, "/steady", { ip: `10.0.0.${i}` })).status).toBe(200);
    const after = await scriptCalls();
    expect(after.evalsha - before.evalsha).toBe(20);
    expect(after.eval - before.eval).toBe(0);
    expect(after.http - before.http).toBe(20); // one HTTP request to Upstash per decision

    await redis.scriptFlush();
    const r = await call(open, "/after-flush");
    expect(r.headers.get("sluice-decision")).toBe("allow");
    const recovered = await scriptCalls();
    expect(recovered.eval - after.eval).toBe(1);
    expect((await call(open, "/after-flush")).headers.get("sluice-decision")).toBe("allow");
    expect((await scriptCalls()).eval - recovered.eval).toBe(0);
  });
});

describe("Redis trouble", () => {
  it("slow Redis: past timeout_ms, open forwards as degraded and closed answers 503", async () => {
    // far past the 1 s budget, and past what a loaded machine adds to it
    stack.bridge.setLatency(5_000);
    try {
      const t0 = Date.now();
      const r = await call(open, "/slow", { ip: "10.1.0.1" });
      expect(r.status).toBe(200);
      expect(r.headers.get("sluice-decision")).toBe("degraded");
      expect(Date.now() - t0).toBeLessThan(5_000); // the decision gave up; it did not wait for Redis
      const c = await call(closed, "/slow", { ip: "10.1.0.1" });
      expect(c.status).toBe(503);
      expect(c.headers.get("retry-after")).toBe("1");
      expect(c.json()).toMatchObject({ status: 503, title: "Rate limiter unavailable" });
    } finally {
      stack.bridge.setLatency(0);
    }
  });

  it("Redis killed: degraded or 503 per on_store_error, never an unhandled error; back to normal when it returns", async () => {
    const port = stack.redis.port;
    await stack.redis.stop();
    const seenBefore = origin.seen.length;
    const r = await call(open, "/down", { ip: "10.2.0.1" });
    expect(r.status).toBe(200);
    expect(r.headers.get("sluice-decision")).toBe("degraded");
    expect(origin.seen.length).toBe(seenBefore + 1);
    const c = await call(closed, "/down", { ip: "10.2.0.1" });
    expect(c.status).toBe(503);
    expect(c.headers.get("content-type")).toBe("application/problem+json");
    expect(origin.seen.length).toBe(seenBefore + 1);

    stack.redis = await startRedis({ port });
    const decision = await until(
      async () => (await call(closed, "/down", { ip: "10.2.0.2" })).headers.get("sluice-decision"),
      (d) => d === "allow",
      { everyMs: 100 },
    );
    expect(decision).toBe("allow");
    expect((await call(open, "/down", { ip: "10.2.0.2" })).headers.get("sluice-decision")).toBe("allow");
  });

  it("no Redis configured at all is a 500 naming the variable, whatever on_store_error says, not a crash", async () => {
    const none = startWorker({ sluice: { on_store_error: "closed", routes }, origin: origin.url });
    try {
      const r = await call(none, "/x");
      expect(r.status).toBe(500);
      expect(r.json()).toMatchObject({ title: "Redis not configured", missing: "UPSTASH_REDIS_REST_URL" });
      expect(r.headers.get("sluice-decision")).toBe("reject");
    } finally {
      await none.dispose();
    }
  });
});
