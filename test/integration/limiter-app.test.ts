import { build } from "esbuild";
import { Miniflare } from "miniflare";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LimiterResult } from "../../src/index.js";
import { fileRedis, sleep, TOKEN } from "./stack.js";

/** Keys from the app's code and limiter(), in an app of a user's own run in workerd against a real Redis. */
const db = fileRedis();
let mf: Miniflare;
let dir: string;

beforeAll(async () => {
  // under the working directory, as workerd reads modules from below it (not /tmp)
  mkdirSync(resolve(".wrangler"), { recursive: true });
  dir = mkdtempSync(resolve(".wrangler/limiter-app-"));
  const script = join(dir, "worker.js");
  await build({
    entryPoints: [new URL("./limiter-app/worker.ts", import.meta.url).pathname],
    outfile: script,
    bundle: true,
    format: "esm",
    platform: "neutral",
    mainFields: ["module", "main"],
    conditions: ["workerd", "worker", "import"],
    loader: { ".lua": "text" },
    logLevel: "silent",
  });
  mf = new Miniflare({
    modules: true,
    scriptPath: script,
    compatibilityDate: "2026-04-01",
    bindings: { UPSTASH_REDIS_REST_URL: db.stack.bridge.url, UPSTASH_REDIS_REST_TOKEN: TOKEN },
    queueProducers: { JOBS: { queueName: "jobs" } },
    queueConsumers: { jobs: { maxBatchSize: 10, maxBatchTimeout: 1 } },
    handleRuntimeStdio: (out: NodeJS.ReadableStream, err: NodeJS.ReadableStream) => (out.resume(), err.resume()),
  });
});

afterAll(async () => {
  await mf?.dispose();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const call = async (path: string, init: { method?: string; ip?: string; user?: string } = {}) => {
  const headers: Record<string, string> = { "CF-Connecting-IP": init.ip ?? "203.0.113.1" };
  if (init.user) headers["X-Test-User"] = init.user;
  return mf.dispatchFetch(`http://app.test${path}`, { method: init.method ?? "GET", headers });
};
const json = async (path: string, method = "GET") => (await (await call(path, { method })).json()) as LimiterResult;

describe("an app in workerd", () => {
  it("limits per user from its own auth, not per IP; a request without a user follows `missing`", async () => {
    const statuses = [];
    for (const ip of ["203.0.113.1", "203.0.113.2", "203.0.113.3"])
      statuses.push((await call("/mw/x", { ip, user: "alice" })).status);
    expect(statuses).toEqual([200, 200, 429]);
    expect((await call("/mw/x", { ip: "203.0.113.3", user: "bob" })).status).toBe(200);
    expect((await call("/mw/x", { ip: "203.0.113.4" })).status).toBe(400);
    const keys = await db.redis.keys("lw:app:per-user:*");
    expect(keys.length).toBeGreaterThan(0);
    expect(keys.join(" ")).not.toMatch(/alice|bob/);
  });

  it("limiter().limit() from a route admits `rate`, then refuses with retryAfterMs; peek spends nothing", async () => {
    expect((await json("/peek/u1")).remaining).toBe(2);
    expect((await json("/peek/u1")).remaining).toBe(2);
    const results = [await json("/limit/u1", "POST"), await json("/limit/u1", "POST"), await json("/limit/u1", "POST")];
    expect(results.map((r) => [r.success, r.remaining])).toEqual([
      [true, 1],
      [true, 0],
      [false, 0],
    ]);
    expect(results[2]?.retryAfterMs).toBeGreaterThan(0);
    expect((await db.redis.keys("lw:jobs:per-user:*")).join(" ")).not.toContain("u1");
  });

  it("limiter().limit() from the queue consumer spends the same buckets", async () => {
    expect((await call("/enqueue/q1", { method: "POST" })).status).toBe(202);
    // the consumer runs when the batch is delivered: wait for its call (bounded), then read what it decided
    let consumed: LimiterResult[] = [];
    for (let i = 0; i < 100 && consumed.length === 0; i++) {
      await sleep(100);
      consumed = (await (await call("/consumed")).json()) as LimiterResult[];
    }
    expect(consumed.map((r) => [r.success, r.remaining])).toEqual([[true, 1]]);
    expect((await json("/peek/q1")).remaining).toBe(1);
  });
});
