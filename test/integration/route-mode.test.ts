import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, startOrigin, type DemoOrigin, useStack } from "./stack.js";

/**
 * The degrade switch (`PUT /__sluice/routes/{name}/mode`) in the built Worker, two isolates (one
 * Miniflare instance each) over the test's real redis-server: each applies a switch once one of
 * its decisions has reported the change counter the write moved, as it does a list entry.
 */
const ADMIN = "mode-admin-token-0123456789";
const page = { status: 200, content_type: "text/plain; charset=utf-8", body: "static page" };
const twice = [{ name: "per-ip", key: "ip", rate: 2, period: "1h", lease: false }];

function config(replica: string): SluiceInput {
  return {
    key_prefix: "md",
    timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
    routes: [
      { name: "api", match: "/api/*", limits: twice },
      {
        name: "reads",
        match: "/reads/*",
        on_limit: "divert",
        divert_url: `${replica}/replica`,
        fallback: page,
        limits: twice,
      },
      { name: "other", match: "/other/*", limits: [{ name: "per-ip", key: "ip", rate: 1000, period: "1s" }] },
    ],
  };
}

const rig = useStack();
let replica: DemoOrigin;
let isolates: Miniflare[] = [];
beforeAll(async () => {
  replica = await startOrigin();
  const options = { sluice: config(replica.url), bindings: { SLUICE_ADMIN_TOKEN: ADMIN } };
  isolates = [rig.worker(options), rig.worker(options)];
  await Promise.all(isolates.map((mf) => mf.ready));
});
afterAll(async () => {
  await replica?.close();
});

const admin = (path: string, method = "GET", body?: unknown, token: string | null = ADMIN) =>
  call(isolates[0]!, `/__sluice${path}`, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
const setMode = (route: string, body: Record<string, unknown>) => admin(`/routes/${route}/mode`, "PUT", body);

let clients = 0;
const client = () => `198.51.100.${++clients}`;

/**
 * Sends `path` from `ip` to `mf` until `done` holds of the answer (at most about a second): a
 * decision of another client's first tells the isolate the counter moved; its lists are read again, deferred.
 */
async function until(mf: Miniflare, path: string, ip: string, done: (r: Awaited<ReturnType<typeof call>>) => boolean) {
  expect((await call(mf, "/other/nudge", { ip: client() })).headers.get("sluice-decision")).toBe("allow");
  let r = await call(mf, path, { ip });
  for (let attempt = 0; attempt < 50 && !done(r); attempt++) {
    await sleep(20);
    r = await call(mf, path, { ip });
  }
  return r;
}

describe("PUT /__sluice/routes/{name}/mode, refused", () => {
  it("without the admin token: 401", async () => {
    expect((await admin("/routes/api/mode", "PUT", { mode: "reject", ttl: "1m" }, null)).status).toBe(401);
    expect((await admin("/routes", "GET", undefined, null)).status).toBe(401);
  });

  it.each([
    ["api", { mode: "sideways", ttl: "1m" }, /^mode: /],
    ["api", { mode: "reject", ttl: "soon" }, /^ttl: /],
    ["api", { mode: "reject" }, /^ttl: is required/],
    ["api", { mode: "reject", ttl: "1m", extra: 1 }, /^body: .*extra/],
    ["nowhere", { mode: "reject", ttl: "1m" }, /^route: no route named "nowhere"/],
    ["api", { mode: "divert", ttl: "1m" }, /^mode: route "api" has no divert_url/],
  ])("%s %j: 400 naming the field", async (route, body, detail) => {
    const r = await setMode(route, body);
    expect(r.status).toBe(400);
    expect(String(r.json().detail)).toMatch(detail);
  });
});

describe("a route's degrade switch", () => {
  it("reject: every request of the route gets the 503 problem on every isolate, other routes do not; normal restores", async () => {
    const before = Date.now();
    const set = await setMode("api", { mode: "reject", ttl: "10m", note: "origin on fire" });
    expect(set.status).toBe(200);
    expect(set.json()).toMatchObject({ ok: true, name: "api", mode: "reject", by: "token", note: "origin on fire" });
    for (const [i, mf] of isolates.entries()) {
      const ip = client();
      const r = await until(mf, "/api/items", ip, (a) => a.status === 503);
      expect(r.status, `isolate ${i}`).toBe(503);
      expect(r.json()).toMatchObject({ title: "Route degraded", mode: "reject" });
      expect(Number(r.headers.get("retry-after"))).toBeGreaterThan(500);
      expect((await call(mf, "/other/x", { ip })).status).toBe(200);
    }
    const routes = (await admin("/routes")).json().routes as Array<Record<string, unknown>>;
    expect(routes).toContainEqual(expect.objectContaining({ name: "api", mode: "reject", by: "token" }));
    expect(routes).toContainEqual({ name: "other", mode: "normal" });
    expect((await setMode("api", { mode: "normal" })).status).toBe(200);
    for (const [i, mf] of isolates.entries())
      expect((await until(mf, "/api/items", client(), (a) => a.status === 200)).status, `isolate ${i}`).toBe(200);
    const entries = (await admin("/ledger?count=20")).json().entries as Array<Record<string, string>>;
    const mine = entries.filter((e) => Number(e.at) >= before && e.event === "admin_route_mode").reverse();
    expect(mine.map((e) => [e.who, JSON.parse(e.detail ?? "{}").mode])).toEqual([
      ["token", "reject"],
      ["token", "normal"],
    ]);
    expect(JSON.parse(mine[0]?.detail ?? "")).toMatchObject({ route: "api", ttl: "10m", note: "origin on fire" });
  });

  it("open: a client past its limit gets through; back to normal it is refused again", async () => {
    const ip = client();
    for (let n = 0; n < 2; n++) expect((await call(isolates[1]!, "/api/o", { ip })).status).toBe(200);
    expect((await call(isolates[1]!, "/api/o", { ip })).status).toBe(429);
    expect((await setMode("api", { mode: "open", ttl: "10m", note: "false alarm" })).status).toBe(200);
    const open = await until(isolates[1]!, "/api/o", ip, (a) => a.status === 200);
    expect(open.status).toBe(200);
    expect(open.headers.get("ratelimit")).toBeNull(); // the limits were not asked
    expect((await setMode("api", { mode: "normal" })).status).toBe(200);
    expect((await until(isolates[1]!, "/api/o", ip, (a) => a.status === 429)).status).toBe(429);
  });

  it("fallback serves the route's fallback; divert sends to its divert_url; the switch ends by itself", async () => {
    const mf = isolates[0]!;
    expect((await setMode("reads", { mode: "fallback", ttl: "10m" })).status).toBe(200);
    const fell = await until(mf, "/reads/a", client(), (a) => a.text === "static page");
    expect([fell.status, fell.text, fell.headers.get("sluice-decision")]).toEqual([200, "static page", "fallback"]);
    expect((await setMode("reads", { mode: "divert", ttl: "2s" })).status).toBe(200);
    const ip = client();
    const sent = await until(mf, "/reads/b?q=1", ip, (a) => a.headers.get("sluice-decision") === "diverted");
    expect(sent.headers.get("sluice-decision")).toBe("diverted");
    expect(sent.json()).toMatchObject({ path: "/replica/reads/b", query: "?q=1" });
    // the 2s switch runs out: the route answers from its origin again, with nobody setting it back
    let back = sent;
    for (let attempt = 0; attempt < 30 && back.headers.get("sluice-decision") !== "allow"; attempt++) {
      await sleep(100);
      back = await call(mf, "/reads/b", { ip: client() });
    }
    expect(back.headers.get("sluice-decision")).toBe("allow");
    expect(back.json()).toMatchObject({ path: "/reads/b" });
    const routes = (await admin("/routes")).json().routes as Array<Record<string, unknown>>;
    expect(routes).toContainEqual({ name: "reads", mode: "normal" });
  });
});
