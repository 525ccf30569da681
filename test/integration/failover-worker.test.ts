import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { startSickOrigin, type SickOrigin } from "../support/sick-origin.js";
import { call, startOrigin, type DemoOrigin, useStack } from "./stack.js";

/**
 * Failover (`divert_on`) in the built Worker, against a real Redis: the main origin fails as the
 * path says (`/fail/` answers 503, `/hang/` never answers), the divert origin (a demo origin, the
 * "replica") answers whatever it gets. Every failure is deterministic: a status, or a request
 * that hangs past a short `origin_timeout`.
 */
const ADMIN = "failover-admin-token-0123456789";
const breaker = { window: "1h", min_requests: 2, error_ratio: 0.5, cooldown: "1h", client_share: 1 };

function config(replica: string, sick: string): SluiceInput {
  const divert_url = `${replica}/replica`;
  return {
    key_prefix: "fo",
    timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
    routes: [
      { name: "reads", match: "/reads/*", divert_url, divert_on: ["5xx", "timeout"], origin_timeout: "500ms" },
      // today's divert route: refusals only (the default divert_on)
      {
        name: "plain",
        match: "/plain/*",
        on_limit: "divert",
        divert_url,
        limits: [{ name: "per-ip", key: "ip", rate: 100, period: "1h", lease: false }],
      },
      { name: "guarded", match: "/guarded/*", divert_url, divert_on: ["breaker"], breaker },
      {
        name: "orders",
        match: "/orders/*",
        methods: ["POST"],
        divert_url,
        divert_on: ["5xx", "timeout"],
        origin_timeout: "1s",
        idempotency: {},
      },
      { name: "writes", match: "/writes/*", methods: ["POST"], divert_url, divert_on: ["5xx", "timeout"] },
      // the divert origin is the sick one too, under a path of its own
      { name: "both", match: "/both/*", divert_url: `${sick}/mirror`, divert_on: ["5xx"] },
    ],
  };
}

const rig = useStack({ origin: startSickOrigin });
let sick: SickOrigin;
let replica: DemoOrigin;
let mf: Miniflare;
beforeAll(async () => {
  sick = rig.origin;
  replica = await startOrigin();
  mf = rig.worker({ sluice: config(replica.url, sick.url), bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
  await mf.ready;
});
afterAll(async () => {
  await replica?.close();
});

const hits = (o: { seen: Array<{ path: string }> }, path: string) => o.seen.filter((s) => s.path === path).length;

describe("a GET the origin failed", () => {
  it("a 5xx: sent to divert_url once, marked diverted, with the origin request's header hygiene", async () => {
    const r = await call(mf, "/reads/fail/1?x=1", {
      ip: "198.51.100.10",
      headers: { "x-http-method-override": "DELETE", "sluice-fencing-token": "999", "x-forwarded-for": "6.6.6.6" },
    });
    expect(r.status).toBe(200);
    expect(r.headers.get("sluice-decision")).toBe("diverted");
    expect(r.json()).toMatchObject({ method: "GET", path: "/replica/reads/fail/1", query: "?x=1" });
    expect(hits(sick, "/reads/fail/1")).toBe(1);
    expect(hits(replica, "/replica/reads/fail/1")).toBe(1);
    const seen = replica.seen.find((s) => s.path === "/replica/reads/fail/1")!;
    expect(seen.headers["x-http-method-override"]).toBeUndefined();
    expect(seen.headers["x-forwarded-for"]).toBe("198.51.100.10");
    expect(Object.keys(seen.headers).filter((h) => h.startsWith("sluice-"))).toEqual([]);
  });

  it("no answer within origin_timeout: diverted", async () => {
    const r = await call(mf, "/reads/hang/1");
    expect(r.status).toBe(200);
    expect(r.headers.get("sluice-decision")).toBe("diverted");
    expect(r.json()).toMatchObject({ path: "/replica/reads/hang/1" });
    expect(hits(sick, "/reads/hang/1")).toBe(1);
    expect(hits(replica, "/replica/reads/hang/1")).toBe(1);
  });

  it("an answer below 500 is the origin's: not diverted", async () => {
    const r = await call(mf, "/reads/fine");
    expect(r.status).toBe(200);
    expect(r.headers.get("sluice-decision")).toBe("allow");
    expect(r.json()).toMatchObject({ origin: "sick", path: "/reads/fine" });
    expect(hits(replica, "/replica/reads/fine")).toBe(0);
  });

  it('the default divert_on (["limit"]) leaves a 5xx as it is', async () => {
    const r = await call(mf, "/plain/fail/1");
    expect(r.status).toBe(503);
    expect(r.headers.get("sluice-decision")).toBe("allow");
    expect(r.json()).toMatchObject({ origin: "sick" });
    expect(hits(replica, "/replica/plain/fail/1")).toBe(0);
  });

  it("a divert origin that fails too: its answer is passed through, and not diverted again", async () => {
    const r = await call(mf, "/both/fail/1");
    expect(r.status).toBe(503);
    expect(r.headers.get("sluice-decision")).toBe("diverted");
    expect(r.json()).toMatchObject({ origin: "sick", path: "/mirror/both/fail/1" });
    expect(hits(sick, "/both/fail/1")).toBe(1);
    expect(hits(sick, "/mirror/both/fail/1")).toBe(1);
    expect(sick.seen.filter((s) => s.path.includes("/both/fail/1"))).toHaveLength(2);
  });
});

describe("the open breaker", () => {
  it("sends what it refuses to divert_url: the origin gets nothing more", async () => {
    for (const ip of ["198.51.100.20", "198.51.100.21"]) {
      const failed = await call(mf, "/guarded/fail", { ip });
      expect(failed.status).toBe(503);
      // divert_on names only "breaker": a 5xx itself is the origin's answer
      expect(failed.headers.get("sluice-decision")).toBe("allow");
    }
    expect(hits(sick, "/guarded/fail")).toBe(2);
    const r = await call(mf, "/guarded/fail", { ip: "198.51.100.22" });
    expect(r.status).toBe(200);
    expect(r.headers.get("sluice-decision")).toBe("diverted");
    expect(r.json()).toMatchObject({ path: "/replica/guarded/fail" });
    expect(hits(sick, "/guarded/fail")).toBe(2);
    expect(hits(replica, "/replica/guarded/fail")).toBe(1);
  });
});

describe("side effects", () => {
  const post = (path: string, key?: string, body = '{"amount":5}') =>
    call(mf, path, {
      method: "POST",
      body,
      headers: { "content-type": "application/json", ...(key ? { "idempotency-key": key } : {}) },
    });

  it("under idempotency, a timeout leaves the outcome unknown: 504 as without failover, not diverted", async () => {
    const r = await post("/orders/hang/1", "fo-hang-1");
    expect(r.status).toBe(504);
    expect(r.headers.get("sluice-decision")).not.toBe("diverted");
    expect(hits(sick, "/orders/hang/1")).toBe(1);
    expect(hits(replica, "/replica/orders/hang/1")).toBe(0);
  });

  it('under idempotency, a 5xx (on_origin_error = "release": not done) is diverted with the body and the claim', async () => {
    const r = await post("/orders/fail/1", "fo-fail-1");
    expect(r.status).toBe(200);
    expect(r.headers.get("sluice-decision")).toBe("diverted");
    expect(r.json()).toMatchObject({ method: "POST", path: "/replica/orders/fail/1", body: '{"amount":5}' });
    const seen = replica.seen.find((s) => s.path === "/replica/orders/fail/1")!;
    expect(seen.headers["idempotency-key"]).toBe("fo-fail-1");
    expect(Number(seen.headers["sluice-fencing-token"])).toBeGreaterThan(0);
    // the divert origin's answer is what was done: a duplicate replays it, and nobody is asked again
    const again = await post("/orders/fail/1", "fo-fail-1");
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.json()).toMatchObject({ path: "/replica/orders/fail/1" });
    expect(hits(sick, "/orders/fail/1")).toBe(1);
    expect(hits(replica, "/replica/orders/fail/1")).toBe(1);
  });

  it("a POST without a claim: its 5xx may have acted, so it is not diverted", async () => {
    const r = await post("/writes/fail/1");
    expect(r.status).toBe(503);
    expect(r.headers.get("sluice-decision")).toBe("allow");
    expect(hits(sick, "/writes/fail/1")).toBe(1);
    expect(hits(replica, "/replica/writes/fail/1")).toBe(0);
  });
});

it("counts diverted requests by route and reason in sluice_diverts_total", async () => {
  const m = await call(mf, "/__sluice/metrics", { headers: { authorization: `Bearer ${ADMIN}` } });
  expect(m.status).toBe(200);
  const count = (route: string, reason: string) =>
    Number(new RegExp(`^sluice_diverts_total\\{route="${route}",reason="${reason}"\\} (\\d+)$`, "m").exec(m.text)?.[1]);
  expect(count("reads", "5xx")).toBe(1);
  expect(count("reads", "timeout")).toBe(1);
  expect(count("guarded", "breaker")).toBe(1);
  expect(count("orders", "5xx")).toBe(1);
  expect(m.text).not.toMatch(/sluice_diverts_total\{route="(plain|writes)"/);
});
