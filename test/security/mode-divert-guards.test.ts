/**
 * Issue 29, finding 2: the degrade switch's `divert` skipped idempotency and sessions. On a
 * failover route with `idempotency.required`, after `PUT /__sluice/routes/orders/mode
 * {"mode":"divert"}` a duplicate of a completed order was diverted as new and two tries of another
 * key both ran: the mode step answered before the guards. `on_limit = "divert"` with idempotency
 * is refused at load for exactly this. The switch now diverts after the guards, holding the claim
 * and the session lock, and the divert origin's answer settles the claim, as failover does.
 * Replayed through the Worker in workerd against a real Redis; the divert origin is a second
 * demo origin (the "replica") that records what it is sent.
 */
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, startOrigin, type DemoOrigin, useStack } from "../integration/stack.js";

const ADMIN = "mode-divert-admin-token-0123456789";

function config(replica: string): SluiceInput {
  const divert_url = `${replica}/replica`;
  return {
    key_prefix: "mdg",
    // about guards, not latency: a loaded machine must not turn claims into 503s
    timeout_ms: 5_000,
    routes: [
      {
        name: "orders",
        match: "/orders/*",
        divert_url,
        divert_on: ["5xx", "timeout"],
        idempotency: { required: true },
        // only probes carry the header: it shows whether the limits are asked (they are not under open or divert)
        limits: [{ name: "probe", key: "header:x-probe", missing: "skip", rate: 1, period: "1h", lease: false }],
        fallback: { status: 503, content_type: "text/plain; charset=utf-8", body: "static page" },
      },
      { name: "calls", match: "/calls/*", divert_url, divert_on: ["5xx"], session: { key: "header:x-session-id" } },
    ],
  };
}

const rig = useStack();
let replica: DemoOrigin;
let mf: Miniflare;
beforeAll(async () => {
  replica = await startOrigin();
  mf = rig.worker({ sluice: config(replica.url), bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
  await mf.ready;
});
afterAll(async () => {
  await replica?.close();
});

const setMode = async (route: string, body: Record<string, unknown>) => {
  const r = await call(mf, `/__sluice/routes/${route}/mode`, {
    method: "PUT",
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  expect(r.status, r.text).toBe(200);
};

/** GETs of the route (no guard) until the switch is seen to apply: `decision` on the answer. */
async function untilApplied(path: string, decision: string): Promise<void> {
  let r = await call(mf, path, { ip: "192.0.2.1" });
  for (let i = 0; i < 100 && r.headers.get("sluice-decision") !== decision; i++) {
    await sleep(20);
    r = await call(mf, path, { ip: "192.0.2.1" });
  }
  expect(r.headers.get("sluice-decision")).toBe(decision);
}

const post = (path: string, body: string, headers: Record<string, string> = {}) =>
  call(mf, path, {
    method: "POST",
    ip: "198.51.100.7",
    body,
    headers: { "content-type": "application/json", ...headers },
  });
const seen = (o: DemoOrigin, path: string, marker: string) =>
  o.seen.filter((s) => s.path === path && s.body.includes(marker));

/** The answer is stored after the response (waitUntil): asks until the replay comes back. */
async function untilReplayed(send: () => ReturnType<typeof post>) {
  let r = await send();
  for (let i = 0; i < 60 && r.headers.get("idempotent-replayed") !== "true"; i++) {
    await sleep(50);
    r = await send();
  }
  return r;
}

describe('the "divert" switch on a route with idempotency and sessions', () => {
  it("a duplicate of a completed order is replayed; two tries of another key are one diverted order; a missing key is refused", async () => {
    const done = await post("/orders/1?status=201", '{"order":"mdg-1"}', { "idempotency-key": "mdg-1" });
    expect(done.status).toBe(201);
    await untilReplayed(() => post("/orders/1?status=201", '{"order":"mdg-1"}', { "idempotency-key": "mdg-1" }));

    await setMode("orders", { mode: "divert", ttl: "10m" });
    await untilApplied("/orders/probe", "diverted");

    // the duplicate of the completed order: its replay, nobody asked again
    const dup = await post("/orders/1?status=201", '{"order":"mdg-1"}', { "idempotency-key": "mdg-1" });
    expect(dup.status).toBe(201);
    expect(dup.headers.get("sluice-decision")).toBe("replay");
    expect(dup.text).toBe(done.text);

    // two tries of another key while the divert origin works on the first
    const body = '{"order":"mdg-2"}';
    const first = post("/orders/2?status=201", body, { "idempotency-key": "mdg-2", "x-demo-delay": "3000" });
    for (let i = 0; i < 200 && seen(replica, "/replica/orders/2", "mdg-2").length === 0; i++) await sleep(20);
    const second = await post("/orders/2?status=201", body, { "idempotency-key": "mdg-2" });
    expect(second.status, second.text).toBe(409);
    const firstDone = await first;
    expect(firstDone.status).toBe(201);
    expect(firstDone.headers.get("sluice-decision")).toBe("diverted");
    // the divert origin was told the claim, and its answer is what duplicates replay
    const sent = seen(replica, "/replica/orders/2", "mdg-2")[0]!;
    expect(sent.headers["idempotency-key"]).toBe("mdg-2");
    expect(Number(sent.headers["sluice-fencing-token"])).toBeGreaterThan(0);
    const replayed = await untilReplayed(() => post("/orders/2?status=201", body, { "idempotency-key": "mdg-2" }));
    expect(replayed.text).toBe(firstDone.text);

    // the route requires a key: without one nothing is diverted
    const keyless = await post("/orders/3", '{"order":"mdg-3"}');
    expect(keyless.status).toBe(400);

    // two keys, two orders: one at the origin before the switch, one at the divert origin
    expect(seen(rig.origin, "/orders/1", "mdg-1")).toHaveLength(1);
    expect(seen(replica, "/replica/orders/1", "mdg-1")).toHaveLength(0);
    expect(seen(replica, "/replica/orders/2", "mdg-2")).toHaveLength(1);
    expect(seen(replica, "/replica/orders/3", "mdg-3")).toHaveLength(0);
    await setMode("orders", { mode: "normal" });
    await untilApplied("/orders/probe", "allow");
  });

  it("one call per session at a time: a second call of the session waits for the diverted first", async () => {
    await setMode("calls", { mode: "divert", ttl: "10m" });
    await untilApplied("/calls/probe", "diverted");
    const session = { "x-session-id": "mdg-s1" };
    const slow = post("/calls/1", '{"call":"mdg-s-first"}', { ...session, "x-demo-delay": "3000" });
    for (let i = 0; i < 200 && seen(replica, "/replica/calls/1", "mdg-s-first").length === 0; i++) await sleep(20);
    const next = await post("/calls/1", '{"call":"mdg-s-second"}', session);
    expect(next.status, next.text).toBe(409);
    expect(next.json()).toMatchObject({ title: "Session busy" });
    expect((await slow).headers.get("sluice-decision")).toBe("diverted");
    expect(seen(replica, "/replica/calls/1", "mdg-s-first")[0]?.headers["sluice-session"]).toBe("mdg-s1");
    expect(seen(replica, "/replica/calls/1", "mdg-s-second")).toHaveLength(0);
    await setMode("calls", { mode: "normal" });
    await untilApplied("/calls/probe", "allow");
  });
});

describe("the other modes keep the guards", () => {
  it('"open" skips the limits only: a duplicate is replayed, a try while the first runs is a 409', async () => {
    await setMode("orders", { mode: "open", ttl: "10m" });
    // a probe's limit admits one an hour: past it, a 200 without RateLimit headers is the switch
    let probe = await call(mf, "/orders/probe", { headers: { "x-probe": "open" } });
    for (let i = 0; i < 100 && (probe.status !== 200 || probe.headers.get("ratelimit") !== null); i++) {
      await sleep(20);
      probe = await call(mf, "/orders/probe", { headers: { "x-probe": "open" } });
    }
    expect([probe.status, probe.headers.get("ratelimit")]).toEqual([200, null]);
    const body = '{"order":"mdg-4"}';
    const first = post("/orders/4", body, { "idempotency-key": "mdg-4", "x-demo-delay": "3000" });
    for (let i = 0; i < 200 && seen(rig.origin, "/orders/4", "mdg-4").length === 0; i++) await sleep(20);
    expect((await post("/orders/4", body, { "idempotency-key": "mdg-4" })).status).toBe(409);
    expect((await first).status).toBe(200);
    const dup = await untilReplayed(() => post("/orders/4", body, { "idempotency-key": "mdg-4" }));
    expect(dup.headers.get("sluice-decision")).toBe("replay");
    expect(seen(rig.origin, "/orders/4", "mdg-4")).toHaveLength(1);
    await setMode("orders", { mode: "normal" });
  });

  it('"reject" and "fallback" answer before any origin is asked and claim nothing: the key runs once back to normal', async () => {
    await setMode("orders", { mode: "reject", ttl: "10m" });
    await untilApplied("/orders/probe", "reject");
    const rejected = await post("/orders/5", '{"order":"mdg-5"}', { "idempotency-key": "mdg-5" });
    expect(rejected.status).toBe(503);
    await setMode("orders", { mode: "fallback", ttl: "10m" });
    await untilApplied("/orders/probe", "fallback");
    const fell = await post("/orders/5", '{"order":"mdg-5"}', { "idempotency-key": "mdg-5" });
    // the static page: no cached copy answers a POST
    expect([fell.status, fell.text, fell.headers.get("sluice-decision")]).toEqual([503, "static page", "fallback"]);
    await setMode("orders", { mode: "normal" });
    await untilApplied("/orders/probe", "allow");
    expect((await post("/orders/5", '{"order":"mdg-5"}', { "idempotency-key": "mdg-5" })).status).toBe(200);
    expect(seen(rig.origin, "/orders/5", "mdg-5")).toHaveLength(1);
    expect(seen(replica, "/replica/orders/5", "mdg-5")).toHaveLength(0);
  });
});
