import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, startOrigin, type DemoOrigin, useStack } from "./stack.js";

/**
 * `on_limit = "divert"` in the built Worker, against a real Redis: the main origin (the rig's demo
 * origin) gets what the limit allows, a second demo origin (the "replica") what it refuses, and a
 * closed port plays a divert origin that is down.
 */
const ADMIN = "divert-admin-token-0123456789";
const DIVERT_TIMEOUT_MS = 500;
const once = [{ name: "per-ip", key: "ip", rate: 1, period: "1h", lease: false }];
const page = { status: 200, content_type: "text/plain; charset=utf-8", body: "static page" };

/** Each route diverts to `replica` or to `down`, with the static fallback page or without. */
function config(replica: string, down: string): SluiceInput {
  const divert = (name: string, match: string, url: string, fallback?: typeof page) => ({
    name,
    match,
    on_limit: "divert" as const,
    divert_url: url,
    divert_timeout: `${DIVERT_TIMEOUT_MS}ms`,
    ...(fallback ? { fallback } : {}),
    limits: once,
  });
  return {
    key_prefix: "dv",
    timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
    routes: [
      divert("reads", "/reads/*", `${replica}/replica`, page),
      divert("bare", "/bare/*", `${replica}/replica`),
      divert("down", "/down/*", down, page),
      divert("down-bare", "/down-bare/*", down),
      { ...divert("llm", "/v1/chat/*", `${replica}/cheap`), methods: ["POST"] },
    ],
  };
}

const rig = useStack();
let origin: DemoOrigin;
let replica: DemoOrigin;
let mf: Miniflare;
beforeAll(async () => {
  origin = rig.origin;
  replica = await startOrigin();
  // nothing listens there: the divert origin is unreachable
  const down = `http://127.0.0.1:${await freePort()}`;
  mf = rig.worker({ sluice: config(replica.url, down), bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
  await mf.ready;
});
afterAll(async () => {
  await replica?.close();
});

let clients = 0;
/** A client of its own per test: the limits are per IP, one request an hour. */
const client = () => `198.51.100.${++clients}`;
const hits = (o: DemoOrigin, path: string) => o.seen.filter((s) => s.path === path).length;

/** The client's one allowed request: it reaches the main origin. */
async function spend(path: string, ip: string, init: { method?: string; body?: string } = {}) {
  const r = await call(mf, path, { ip, ...init });
  expect(r.headers.get("sluice-decision")).toBe("allow");
  expect(r.status).toBe(200);
  return r;
}

describe('on_limit = "divert"', () => {
  it("sends what the limit allows to the main origin", async () => {
    const ip = client();
    const before = hits(replica, "/replica/reads/items");
    const r = await spend("/reads/items?page=1", ip);
    expect(r.json()).toMatchObject({ path: "/reads/items", query: "?page=1" });
    expect(r.headers.get("ratelimit")).toMatch(/^"per-ip";r=0;t=\d+$/);
    expect(hits(replica, "/replica/reads/items")).toBe(before);
  });

  it("diverts what it refuses to divert_url, built like an origin request, with the RateLimit headers", async () => {
    const ip = client();
    await spend("/reads/list?page=2", ip);
    const main = hits(origin, "/reads/list");
    const r = await call(mf, "/reads/list?page=2", {
      ip,
      headers: { "x-forwarded-for": "6.6.6.6", "sluice-fencing-token": "999", "Sluice-Job-Id": "forged" },
    });
    expect(r.status).toBe(200);
    expect(r.headers.get("sluice-decision")).toBe("diverted");
    expect(r.json()).toMatchObject({ path: "/replica/reads/list", query: "?page=2" });
    expect(r.headers.get("ratelimit-policy")).toBe('"per-ip";q=1;w=3600');
    expect(r.headers.get("ratelimit")).toMatch(/^"per-ip";r=0;t=\d+$/);
    expect(r.headers.get("retry-after")).toBeNull();
    expect(hits(origin, "/reads/list")).toBe(main);
    const seen = replica.seen.at(-1)!;
    expect(seen.path).toBe("/replica/reads/list");
    expect(seen.headers["x-forwarded-for"]).toBe(ip);
    expect(seen.headers["x-real-ip"]).toBe(ip);
    expect(Object.keys(seen.headers).filter((h) => h.startsWith("sluice-"))).toEqual([]);
  });

  it("relays the divert origin's 4xx as its answer (only no answer or a 5xx is a failure)", async () => {
    const ip = client();
    await spend("/reads/missing", ip);
    const r = await call(mf, "/reads/missing?status=404", { ip });
    expect(r.status).toBe(404);
    expect(r.headers.get("sluice-decision")).toBe("diverted");
  });

  it("diverts a POST with its body (an LLM route sent to a cheaper model)", async () => {
    const ip = client();
    const body = JSON.stringify({ model: "large", messages: [{ role: "user", content: "hi" }] });
    const init = { method: "POST", body, headers: { "content-type": "application/json" } };
    await spend("/v1/chat/completions", ip, init);
    const r = await call(mf, "/v1/chat/completions", { ip, ...init });
    expect(r.headers.get("sluice-decision")).toBe("diverted");
    expect(r.json()).toMatchObject({ method: "POST", path: "/cheap/v1/chat/completions", body });
    expect(hits(origin, "/v1/chat/completions")).toBe(1);
  });
});

describe("when the divert origin fails too", () => {
  /** Spends the client's request on `path`, then sends the refused one with `query`. */
  async function refused(path: string, query = "") {
    const ip = client();
    await spend(path, ip);
    const started = Date.now();
    const r = await call(mf, path + query, { ip });
    return { ...r, ms: Date.now() - started };
  }

  function expectStaticPage(r: Awaited<ReturnType<typeof refused>>) {
    expect(r.status).toBe(200);
    expect(r.text).toBe("static page");
    expect(r.headers.get("sluice-decision")).toBe("fallback");
    expect(r.headers.get("ratelimit")).toMatch(/^"per-ip";r=0;t=\d+$/);
  }

  function expectTooManyRequests(r: Awaited<ReturnType<typeof refused>>) {
    expect(r.status).toBe(429);
    expect(r.headers.get("sluice-decision")).toBe("reject");
    expect(r.headers.get("content-type")).toBe("application/problem+json");
    expect(Number(r.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(r.json()).toMatchObject({ status: 429, limit: "per-ip" });
  }

  it("unreachable: the route's static fallback page", async () => {
    expectStaticPage(await refused("/down/a"));
  });

  it("unreachable, no fallback page: the 429 problem", async () => {
    expectTooManyRequests(await refused("/down-bare/a"));
  });

  it("a 5xx: the static page, else the 429", async () => {
    const before = hits(replica, "/replica/reads/flaky");
    expectStaticPage(await refused("/reads/flaky", "?status=503"));
    expectTooManyRequests(await refused("/bare/flaky", "?status=502"));
    expect(hits(replica, "/replica/reads/flaky")).toBe(before + 1);
  });

  it("slower than divert_timeout: abandoned at the timeout, then the static page, else the 429", async () => {
    const page = await refused("/reads/slow", "?delay=5000");
    expectStaticPage(page);
    const bare = await refused("/bare/slow", "?delay=5000");
    expectTooManyRequests(bare);
    // abandoned: answered after the timeout, and before the divert origin would have answered
    for (const r of [page, bare]) {
      expect(r.ms).toBeGreaterThanOrEqual(DIVERT_TIMEOUT_MS - 50);
      expect(r.ms).toBeLessThan(5_000);
    }
  });
});

it("counts diverted requests under the refusing limit in the metrics, and by reason (limit)", async () => {
  const m = await call(mf, "/__sluice/metrics", { headers: { authorization: `Bearer ${ADMIN}` } });
  expect(m.status).toBe(200);
  const diverted = /^sluice_decisions_total\{route="reads",limit="per-ip",decision="diverted"\} (\d+)$/m.exec(m.text);
  expect(Number(diverted?.[1])).toBeGreaterThanOrEqual(2);
  const byReason = /^sluice_diverts_total\{route="reads",reason="limit"\} (\d+)$/m.exec(m.text);
  expect(Number(byReason?.[1])).toBe(Number(diverted?.[1]));
});
