import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RespClient } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { metricsKeys } from "../../src/store/layout.js";
import { call, commandCalls, sleep, useStack } from "./stack.js";

/*
 * Sparse edge traffic (several isolates, each a request now and then, one limit per IP, the
 * default configuration) replayed at small scale through the real Worker, one Miniflare instance
 * per isolate, every command counted in INFO commandstats of the test's own redis-server (which
 * counts the commands a script runs too: what Upstash bills). Background work (lists, overrides,
 * metrics) must cost nothing while nothing changes: a decision is its 4 billed commands, all in
 * one request, and nothing else runs.
 */

const ADMIN = "operator-token-0123456789";
const ISOLATES = 4;
const SPARSE: SluiceInput = {
  key_prefix: "sparse",
  timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
  routes: [{ name: "api", match: "/api/*", limits: [{ name: "per-ip", rate: 5, period: "1s" }] }],
};

const rig = useStack({ sluice: SPARSE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN }, instances: ISOLATES });
let resp: RespClient;
beforeAll(() => {
  resp = RespClient.fromUrl(rig.stack.redis.url);
});
afterAll(() => resp?.close());

/** Calls per command since `before`, without the test's own INFO. */
async function since(before: Record<string, number>): Promise<Record<string, number>> {
  const after = await commandCalls(rig.stack);
  return Object.fromEntries(
    Object.entries(after)
      .filter(([name]) => name !== "info")
      .map(([name, n]): [string, number] => [name, n - (before[name] ?? 0)])
      .filter(([, n]) => n !== 0),
  );
}

const admin = (path: string, method: string, body?: unknown) =>
  call(rig.workers[0]!, `/__sluice${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });

/** One request to every isolate in turn, each from its own client; the decisions each gave. */
async function round(n: number): Promise<string[]> {
  const decisions: string[] = [];
  for (const [i, mf] of rig.workers.entries()) {
    const r = await call(mf, `/api/items/${n}`, { ip: `198.18.${i}.${n % 250}` });
    decisions.push(r.headers.get("sluice-decision") ?? String(r.status));
  }
  return decisions;
}

describe("sparse traffic through several isolates, default configuration", () => {
  it("costs exactly the decisions' own commands: 4 billed per decision, no background command at all", async () => {
    // each isolate's first request reads the lists (one GET of the counter and one HGETALL): once per
    // isolate. The override hash is neither read by the script nor copied: the counter reads 0, so
    // nothing was ever written there
    const fresh = await commandCalls(rig.stack);
    expect(await round(0)).toEqual(Array(ISOLATES).fill("allow"));
    await sleep(200); // the deferred work of those first requests lands
    const first = await since(fresh);
    expect([first.hmget ?? 0, first.hgetall, first.get, first.set]).toEqual([0, ISOLATES, ISOLATES, ISOLATES]);
    const before = await commandCalls(rig.stack);
    const rounds = 5;
    for (let n = 1; n <= rounds; n++) expect(await round(n)).toEqual(Array(ISOLATES).fill("allow"));
    await sleep(200); // anything the decisions deferred has run by now
    const used = await since(before);
    const decisions = rounds * ISOLATES;
    if (process.env.SLUICE_TEST_LOGS) console.log(`${decisions} decisions: ${JSON.stringify(used)}`);
    expect(used).toEqual({ evalsha: decisions, time: decisions, mget: decisions, set: decisions });
  });

  it("an override set through the admin API applies on each isolate's next decision, learned from the version its reply carries", async () => {
    await round(10);
    await sleep(200);
    const before = await commandCalls(rig.stack);
    const version = Number(await resp.send(["GET", "sparse:version"]));
    expect((await admin("/overrides", "PUT", { route: "api", limit: "per-ip", rate: 50, ttl: "1m" })).status).toBe(200);
    expect(Number(await resp.send(["GET", "sparse:version"]))).toBe(version + 1); // the write bumped it, once (one Redis)
    const limits = [];
    for (const [i, mf] of rig.workers.entries())
      limits.push((await call(mf, "/api/x", { ip: `198.18.${i}.251` })).headers.get("ratelimit"));
    expect(limits.every((l) => /^"per-ip";r=49;/.test(l ?? ""))).toBe(true);
    await sleep(200); // each isolate refetches its copy once, deferred
    const used = await since(before);
    // each isolate: one HMGET in its first decision after the change (its copy was behind), one HGETALL to refetch it
    expect(used.hmget).toBe(ISOLATES);
    // one change moves the one version: each isolate's next request also reads the lists again (GET + HGETALL), once
    const lists = await commandCalls(rig.stack);
    expect(await round(11)).toEqual(Array(ISOLATES).fill("allow"));
    await sleep(200);
    const reread = await since(lists);
    expect([reread.hgetall, reread.get]).toEqual([ISOLATES, ISOLATES]);
    const quiet = await commandCalls(rig.stack);
    expect(await round(12)).toEqual(Array(ISOLATES).fill("allow"));
    await sleep(200);
    expect(await since(quiet)).toEqual({ evalsha: ISOLATES, time: ISOLATES, mget: ISOLATES, set: ISOLATES });
    expect((await admin("/overrides", "DELETE", { route: "api", limit: "per-ip" })).status).toBe(200);
  });

  it("a deny entry added through the admin API reaches every isolate once a decision of its has reported the change", async () => {
    const denied = "198.51.100.77";
    for (const mf of rig.workers) expect((await call(mf, "/api/d", { ip: denied })).status).toBe(200);
    expect((await admin("/lists", "PUT", { kind: "deny", entry: denied, ttl: "1m" })).status).toBe(200);
    for (const [i, mf] of rig.workers.entries()) {
      // a decision (another client's) tells the isolate the version moved; its lists are read again, deferred
      expect((await call(mf, "/api/d", { ip: `198.18.${i}.252` })).headers.get("sluice-decision")).toBe("allow");
      let status = 0;
      for (let attempt = 0; attempt < 50 && status !== 403; attempt++) {
        status = (await call(mf, "/api/d", { ip: denied })).status;
        if (status !== 403) await sleep(20);
      }
      expect(status, `isolate ${i}`).toBe(403);
    }
    expect((await admin("/lists", "DELETE", { kind: "deny", entry: denied })).status).toBe(200);
  });

  it("the version key has a TTL, and a forced metrics flush writes the minute's figures in one HSET, whose key has a TTL", async () => {
    expect(Number(await resp.send(["PTTL", "sparse:version"]))).toBeGreaterThan(0);
    await round(13);
    const before = await commandCalls(rig.stack);
    const scrape = await admin("/metrics", "GET");
    expect(scrape.status).toBe(200);
    expect(scrape.text).toMatch(/sluice_decisions_total\{route="api",limit="-",decision="allow"\} \d+/);
    const used = await since(before);
    // the flush: one HSET of the minute's figures, an HINCRBY per all-time counter that moved, an EXPIRE only
    // where this isolate writes a key for the first time; the scrape's reads (HGETALL) and the admin guard's
    // throttle (INCR, DECR, PTTL); nothing else
    expect(used.hset).toBe(1);
    const flushOrScrape = ["hset", "hincrby", "expire", "hgetall", "incr", "decr", "pttl"];
    expect(Object.keys(used).filter((c) => !flushOrScrape.includes(c))).toEqual([]);
    const keys = metricsKeys("sparse", Math.floor(Date.now() / 60_000));
    const ttl = async (key: string) => Number(await resp.send(["TTL", key]));
    // the minute just written (or, across a minute's edge, the one before it) and the all-time hash both expire
    const minuteTtl = Math.max(
      await ttl(keys.minute),
      await ttl(metricsKeys("sparse", Math.floor(Date.now() / 60_000) - 1).minute),
    );
    expect(minuteTtl).toBeGreaterThan(0);
    expect(await ttl(keys.total)).toBeGreaterThan(0);
  });
});
