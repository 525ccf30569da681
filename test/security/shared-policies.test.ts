/**
 * Security regressions for the shared policies of a route, replayed over HTTP against a real Redis:
 * one client opening a route's breaker for everybody, a session id used by somebody else to hold
 * its owner's session, and path parameters (`;`) that carry a request past its route.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { hashIdentifier } from "../../src/identity/hash.js";
import { idKeyOf, pseudonym } from "../../src/identity/pseudonym.js";
import { call, sleep, type DemoOrigin, useStack } from "../integration/stack.js";

const ADMIN = "policies-admin-token-0123456789";
const once = [{ name: "once", key: "ip", rate: 1, period: "1h" }];
const ROUTES: SluiceInput["routes"] = [
  // the breaker's defaults: min_requests 20, client_share 0.25, so a client counts 5 times at most
  { name: "fragile", match: "/fragile", breaker: {} },
  { name: "brittle", match: "/brittle", breaker: {} },
  { name: "orders", match: "/orders", session: { key: "header:x-session-id" } },
  { name: "agents", match: "/agents", session: { key: "header:x-session-id", principal: "header:x-api-key" } },
  { name: "admin", match: "/admin", limits: once },
  { name: "public", match: "/public/*" },
];
const SLUICE: SluiceInput = { key_prefix: "sp", timeout_ms: 2_000, routes: ROUTES };
const REJECTING: SluiceInput = { key_prefix: "sr", timeout_ms: 2_000, routes: ROUTES, paths: { parameters: "reject" } };

const bindings = { SLUICE_ADMIN_TOKEN: ADMIN };
const rig = useStack({ sluice: SLUICE, bindings });
let origin: DemoOrigin;
let mf: Miniflare;
let rejecting: Miniflare;

beforeAll(async () => {
  ({ origin, mf } = rig);
  rejecting = rig.worker({ sluice: REJECTING, bindings });
  await rejecting.ready;
});

const hits = (path: string) => origin.seen.filter((r) => r.path === path).length;

describe("breaker: one client cannot open a route's breaker for everybody", () => {
  const VICTIM = "192.0.2.7";
  const fail = (path: string, ip: string, times: number) =>
    Promise.all(Array.from({ length: times }, () => call(mf, `${path}?status=500`, { ip })));

  it("50 failing requests from one IP never open it for another IP; failures from four IPs do", async () => {
    for (let i = 0; i < 50; i++) {
      const r = await call(mf, "/fragile?status=500", { ip: "192.0.2.66" });
      expect(r.status, `attack request ${i}`).toBe(500); // the origin's own 500, never the breaker's 503
    }
    expect(hits("/fragile")).toBe(50);
    const victim = await call(mf, "/fragile", { ip: VICTIM });
    expect(victim.status).toBe(200);
    expect(victim.headers.get("sluice-decision")).toBe("allow");
    expect(hits("/fragile")).toBe(51);
    // two more failing IPs: 5 + 5 + 5 failures and the victim's success counted, still short of 20
    for (const ip of ["198.51.100.2", "198.51.100.3"]) await fail("/fragile", ip, 5);
    expect((await call(mf, "/fragile", { ip: VICTIM })).status).toBe(200);
    await fail("/fragile", "198.51.100.4", 5); // a fourth failing IP: open, for everybody
    const before = hits("/fragile");
    const shed = await call(mf, "/fragile", { ip: VICTIM });
    expect(shed.status).toBe(503);
    expect(shed.json()).toMatchObject({ title: "Origin unavailable" });
    expect(hits("/fragile")).toBe(before);
  });

  it("one IP's flood of successes cannot hold it closed while four IPs see failures", async () => {
    for (let i = 0; i < 50; i++) expect((await call(mf, "/brittle", { ip: "192.0.2.67" })).status).toBe(200);
    for (const ip of ["198.51.100.11", "198.51.100.12", "198.51.100.13", "198.51.100.14"])
      await fail("/brittle", ip, 5);
    const shed = await call(mf, "/brittle", { ip: VICTIM });
    expect(shed.status).toBe(503); // 20 failures of 25 counted outcomes, not 20 of 70
  });
});

describe("sessions: a session id does not reach another principal's lock", () => {
  const VICTIM = "192.0.2.10";
  const ATTACKER = "192.0.2.99";
  const post = (path: string, ip: string, sessionId: string, headers: Record<string, string> = {}) =>
    call(mf, path, {
      method: "POST",
      ip,
      body: "{}",
      headers: { "content-type": "application/json", "x-session-id": sessionId, ...headers },
    });
  /** Starts a slow call (500 ms at the origin) and returns once it is at the origin: from then on its lock is held. */
  async function holding(path: string, ip: string, sessionId: string, headers: Record<string, string> = {}) {
    const seen = origin.seen.length;
    const done = post(`${path}?delay=500`, ip, sessionId, headers);
    for (let i = 0; i < 200 && !origin.seen.slice(seen).some((r) => r.headers["x-session-id"] === sessionId); i++)
      await sleep(5);
    return { done };
  }
  const ledger = async () =>
    (await call(mf, "/__sluice/ledger?count=2000", { headers: { authorization: `Bearer ${ADMIN}` } })).json()
      .entries as Array<Record<string, string>>;

  beforeAll(async () => {
    await post("/orders", VICTIM, "warm-up"); // the first call loads the Lua script: keep it out of the timing
  });

  it("the victim's held session: its own second call is refused, the attacker's call with its id is not", async () => {
    const held = await holding("/orders", VICTIM, "victim-s");
    const [attacker, again] = await Promise.all([
      post("/orders", ATTACKER, "victim-s"),
      post("/orders", VICTIM, "victim-s"),
    ]);
    expect(again.status).toBe(409); // still one call at a time within the victim's own session
    expect(again.json()).toMatchObject({ title: "Session busy" });
    expect(attacker.status, attacker.text).toBe(200); // not held at 409 by the victim's lock
    expect((await held.done).status).toBe(200);
    // the origin is told the session as it was sent, and each grant's token, from one rising counter
    const calls = origin.seen.filter((r) => r.path === "/orders" && r.headers["x-session-id"] === "victim-s");
    expect(calls.map((r) => r.headers["sluice-session"])).toEqual(["victim-s", "victim-s"]);
    const tokens = calls.map((r) => Number(r.headers["sluice-fencing-token"]));
    expect(new Set(tokens).size).toBe(2);
    // two locks, one per principal (the lock hashes [principal, session]), each granted and released in the ledger
    const session = JSON.stringify([["header:x-session-id", "victim-s"]]);
    // the ledger names a lock by the keyed id of its hash (issue 29, finding 14: the plain hash gave the IP back to guesses)
    const lockOf = async (ip: string) =>
      pseudonym(
        idKeyOf({ SLUICE_ADMIN_TOKEN: ADMIN }),
        await hashIdentifier(JSON.stringify([JSON.stringify([["ip", ip]]), session])),
      );
    const entries = await ledger();
    for (const key of [await lockOf(VICTIM), await lockOf(ATTACKER)]) {
      const events = entries.filter((e) => e.route === "orders" && e.key === key).map((e) => e.event);
      expect(events).toEqual(expect.arrayContaining(["session_grant", "session_release"]));
    }
  });

  it("the attacker holding a call under the victim's id does not block the victim", async () => {
    const held = await holding("/orders", ATTACKER, "victim-t");
    const [victim, attackerAgain] = await Promise.all([
      post("/orders", VICTIM, "victim-t"),
      post("/orders", ATTACKER, "victim-t"),
    ]);
    expect(victim.status, victim.text).toBe(200);
    expect(attackerAgain.status).toBe(409); // the attacker only ever holds its own lock
    expect((await held.done).status).toBe(200);
  });

  it("principal = header:x-api-key: one key's session is one lock from any IP; another key's is not", async () => {
    const held = await holding("/agents", VICTIM, "agent-s", { "x-api-key": "key-a" });
    const [sameKey, otherKey] = await Promise.all([
      post("/agents", "192.0.2.11", "agent-s", { "x-api-key": "key-a" }),
      post("/agents", VICTIM, "agent-s", { "x-api-key": "key-b" }),
    ]);
    expect(sameKey.status).toBe(409);
    expect(otherKey.status, otherKey.text).toBe(200);
    expect((await held.done).status).toBe(200);
  });
});

describe("paths: ;parameters cannot carry a request past its route", () => {
  it("/public/..;/admin meets the /admin route's limit, and reaches the origin as sent", async () => {
    const ip = "203.0.113.50";
    expect((await call(mf, "/admin", { ip })).status).toBe(200);
    const r = await call(mf, "/public/..;/admin", { ip });
    expect(r.status).toBe(429);
    expect(r.json()).toMatchObject({ limit: "once" });
    const first = await call(mf, "/public/..;/admin", { ip: "203.0.113.51" });
    expect(first.status).toBe(200); // one bucket per IP on /admin: the first request of another IP passes
    expect(first.json()).toMatchObject({ path: "/public/..;/admin" }); // the origin gets what the client sent
    expect((await call(mf, "/admin", { ip: "203.0.113.51" })).status).toBe(429);
  });

  it("/admin;x meets the /admin route's limit too", async () => {
    const ip = "203.0.113.52";
    expect((await call(mf, "/admin;x", { ip })).status).toBe(200);
    expect((await call(mf, "/admin", { ip })).status).toBe(429);
    expect((await call(mf, "/admin;jsessionid=2", { ip })).status).toBe(429);
  });

  it('with paths.parameters = "reject" a path with ";" is a 400 problem', async () => {
    const before = origin.seen.length;
    for (const path of ["/public/..;/admin", "/admin;x", "/public/x;y"]) {
      const r = await call(rejecting, path, { ip: "203.0.113.60" });
      expect(r.status, path).toBe(400);
      expect(r.headers.get("content-type")).toContain("application/problem+json");
      expect(r.json()).toMatchObject({ status: 400, title: "Bad request path" });
    }
    expect(origin.seen.length).toBe(before);
    expect((await call(rejecting, "/admin", { ip: "203.0.113.60" })).status).toBe(200);
  });
});
