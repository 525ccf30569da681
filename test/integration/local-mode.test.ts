import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startRedis } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, startWorker, type DemoOrigin, type RedisStack, useStack } from "./stack.js";

/*
 * on_store_error = "local" (the default) against "open" and "closed", with Redis hung (the bridge
 * takes each request and never answers) and with Redis stopped (the bridge's connection is refused
 * and it fails fast). One Worker is one isolate, so the local bound is the limit's own:
 * burst + rate × duration.
 */

const RATE = 10; // per second
const BURST = 20;
const routes = [
  { name: "api", match: "/api/*", limits: [{ name: "per-ip", rate: RATE, period: "1s", burst: BURST }] },
  {
    name: "sale",
    match: "/sale",
    on_limit: "fallback" as const,
    fallback: { body: "sold out" },
    limits: [{ name: "site", key: "global", rate: 1, period: "1m" }],
  },
  { name: "quota", match: "/quota", peek: "sale" },
  { name: "canary", match: "/canary", limits: [{ name: "strict", rate: 1, period: "1m", shadow: true }] },
];
const sluice = (extra: Partial<SluiceInput>): SluiceInput => ({ timeout_ms: 100, routes, ...extra });

const rig = useStack();
let stack: RedisStack;
let origin: DemoOrigin;
let local: Miniflare;
let open: Miniflare;
let closed: Miniflare;

beforeAll(async () => {
  ({ stack, origin } = rig);
  const worker = (s: SluiceInput) => rig.worker({ sluice: s });
  local = worker(sluice({})); // the default
  open = worker(sluice({ on_store_error: "open" }));
  closed = worker(sluice({ on_store_error: "closed" }));
  await Promise.all([local.ready, open.ready, closed.ready]);
  // every isolate has done its first requests (list refresh, script load) while Redis was well
  await Promise.all([local, open, closed].map((w) => call(w, "/api/warm", { ip: "10.9.9.9" })));
});

interface Run {
  statuses: number[];
  decisions: Array<string | null>;
  retryAfters: Array<string | null>;
  /** From the first request sent to the last answer received. */
  elapsedMs: number;
}

/** One client sending `n` requests at an even pace over `spanMs`, each without waiting for the one before. */
async function paced(mf: Miniflare, ip: string, n = 80, spanMs = 3_000): Promise<Run> {
  const started = Date.now();
  const pending: Array<ReturnType<typeof call>> = [];
  for (let i = 0; i < n; i++) {
    await sleep(Math.max(0, started + (i * spanMs) / n - Date.now()));
    pending.push(call(mf, `/api/items/${i}`, { ip }));
  }
  const replies = await Promise.all(pending);
  return {
    statuses: replies.map((r) => r.status),
    decisions: replies.map((r) => r.headers.get("sluice-decision")),
    retryAfters: replies.map((r) => r.headers.get("retry-after")),
    elapsedMs: Date.now() - started,
  };
}

/**
 * What one isolate may admit over a run: the burst, plus the rate over the time the run took (the
 * Worker decided every request inside it), plus one token: the Worker's clock and this one are
 * read in whole milliseconds in two processes, so a refill can land on either side of an edge.
 */
const boundOf = (run: Run) => BURST + Math.floor((RATE * run.elapsedMs) / 1000) + 1;

const admittedIn = (run: Run) => run.statuses.filter((s) => s === 200).length;
const figures: Record<string, { admitted: number; bound: number; elapsedMs: number }> = {};

/** The three policies, side by side, each a client of its own. */
async function outage(label: string, net: number): Promise<void> {
  const [l, o, c] = await Promise.all([
    paced(local, `10.1.${net}.1`),
    paced(open, `10.2.${net}.1`),
    paced(closed, `10.3.${net}.1`),
  ]);

  // local: a limit, never a 5xx; the admitted are degraded, the refused are 429s with a Retry-After
  expect(l.statuses.filter((s) => s >= 500)).toEqual([]);
  l.statuses.forEach((s, i) => {
    expect(s === 200 || s === 429, `status ${s}`).toBe(true);
    expect(l.decisions[i]).toBe(s === 200 ? "degraded" : "reject");
    if (s === 429) expect(Number(l.retryAfters[i])).toBeGreaterThanOrEqual(1);
  });
  const admitted = admittedIn(l);
  figures[label] = { admitted, bound: boundOf(l), elapsedMs: l.elapsedMs };
  expect(admitted).toBeLessThanOrEqual(boundOf(l));
  expect(admitted).toBeGreaterThanOrEqual(BURST); // the local bucket started full: a limit, not a wall

  // open: everything through, degraded; closed: every request a 503
  expect(o.statuses).toEqual(o.statuses.map(() => 200));
  expect(new Set(o.decisions)).toEqual(new Set(["degraded"]));
  expect(c.statuses).toEqual(c.statuses.map(() => 503));
}

describe("Redis hung (requests taken, never answered)", () => {
  it("local holds a client at 80 requests in 3 s to burst + rate × duration; open admits all; closed answers 503", async () => {
    stack.bridge.setMode("hang");
    try {
      await outage("hung", 1);
    } finally {
      stack.bridge.setMode("normal");
    }
  });
});

describe("Redis stopped (connections refused)", () => {
  let port = 0;
  beforeAll(async () => {
    port = stack.redis.port;
    await stack.redis.stop();
  });

  it("local holds a client at 80 requests in 3 s to burst + rate × duration; open admits all; closed answers 503", async () => {
    await outage("stopped", 2);
  });

  it("a local refusal is shed as the route says; peek routes read local state without spending; shadow limits never refuse", async () => {
    const first = await call(local, "/sale", { ip: "10.4.0.1" });
    expect([first.status, first.headers.get("sluice-decision")]).toEqual([200, "degraded"]);
    const shed = await call(local, "/sale", { ip: "10.4.0.2" }); // a global limit: one bucket, in this isolate
    expect([shed.status, shed.headers.get("sluice-decision")]).toEqual([200, "fallback"]);
    expect(shed.text).toBe(first.text); // the last good copy, as for a refusal by Redis

    for (let i = 0; i < 3; i++) {
      const quota = await call(local, "/quota", { ip: "10.4.0.3" });
      expect([quota.status, quota.headers.get("sluice-decision")]).toEqual([200, "degraded"]);
      expect(quota.headers.get("ratelimit")).toMatch(/^"site";r=0;t=\d+$/);
    }

    for (let i = 0; i < 3; i++)
      expect((await call(local, "/canary", { ip: "10.4.0.4" })).headers.get("sluice-decision")).toBe("degraded");
  });

  it("back to Redis's decisions once it returns", async () => {
    stack.redis = await startRedis({ port });
    let decision: string | null = null;
    for (let i = 0; i < 100 && decision !== "allow"; i++) {
      decision = (await call(local, "/api/again", { ip: "10.5.0.1" })).headers.get("sluice-decision");
      if (decision !== "allow") await sleep(100);
    }
    expect(decision).toBe("allow");
  });
});

describe("no Redis configured at all", () => {
  it("is not an outage: a guarded route answers 500 naming the variable, logged once; other paths still answer", async () => {
    let out = "";
    const none = startWorker({
      sluice: { routes: [{ name: "r", match: "/x", limits: [{ name: "per-ip", rate: 1, period: "1m", burst: 2 }] }] },
      origin: origin.url,
      stdout: (text) => (out += text),
    });
    try {
      const replies = [await call(none, "/x", { ip: "10.6.0.1" }), await call(none, "/x", { ip: "10.6.0.2" })];
      for (const r of replies) {
        expect(r.status).toBe(500);
        expect(r.headers.get("content-type")).toBe("application/problem+json");
        expect(r.json()).toMatchObject({
          status: 500,
          title: "Redis not configured",
          missing: "UPSTASH_REDIS_REST_URL",
        });
        expect(r.json().detail).toContain("UPSTASH_REDIS_REST_URL");
      }
      // an unguarded path is passed on as before
      expect((await call(none, "/elsewhere", { ip: "10.6.0.1" })).status).toBe(200);
      await vi.waitFor(() => expect(out).toContain("redis_not_configured"), { timeout: 10_000 });
      expect(out.match(/"event":"redis_not_configured"/g)).toHaveLength(1);
      expect(out).toContain('"missing":"UPSTASH_REDIS_REST_URL"');
    } finally {
      await none.dispose();
    }
  });

  it("names the token when only the URL is set", async () => {
    const half = startWorker({
      sluice: { routes: [{ name: "r", match: "/x", limits: [{ name: "per-ip", rate: 1, period: "1m" }] }] },
      origin: origin.url,
      bindings: { UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9" },
    });
    try {
      const r = await call(half, "/x", { ip: "10.6.0.3" });
      expect(r.status).toBe(500);
      expect(r.json()).toMatchObject({ missing: "UPSTASH_REDIS_REST_TOKEN" });
    } finally {
      await half.dispose();
    }
  });
});

afterAll(() => {
  // the figures docs/regions-and-leases.md quotes
  console.log(`local mode, limit ${RATE}/s burst ${BURST}, 80 requests in 3 s: ${JSON.stringify(figures)}`);
});
