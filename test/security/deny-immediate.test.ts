/**
 * Issue 29, finding 17: the operator's deny entry missed the next request. After `PUT
 * /__sluice/lists` of `jwt:sub=eve` and another client's decision on the same isolate, eve's next
 * request was still admitted: the writing isolate learned of its own write only from a decision
 * reporting the change counter, then read the lists in the background while that next request was
 * answered from the old copy. The isolate that writes an entry (or a route's degrade switch) now
 * reads it back before answering the write; another isolate applies it once a decision of its has
 * reported the change and the read that starts has landed. Replayed through two Workers (two
 * isolates) in workerd against a real Redis, the admin API called on the first.
 */
import { sign } from "hono/jwt";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack } from "../integration/stack.js";

const ADMIN = "deny-immediate-admin-token-0123456789";
const SECRET = "deny-immediate-secret-0123456789abcdef";

const SLUICE: SluiceInput = {
  key_prefix: "dim",
  timeout_ms: 2_000,
  routes: [
    { name: "api", match: "/api/*", limits: [{ name: "per-ip", key: "ip", rate: 1_000, period: "1m" }] },
    { name: "switched", match: "/switched/*", limits: [{ name: "per-ip", key: "ip", rate: 1_000, period: "1m" }] },
  ],
};

const rig = useStack({
  sluice: SLUICE,
  instances: 2,
  bindings: { SLUICE_ADMIN_TOKEN: ADMIN, SLUICE_JWT_SECRET: SECRET },
});
let writer: Miniflare;
let other: Miniflare;
beforeAll(() => {
  [writer, other] = rig.workers as [Miniflare, Miniflare];
});

const bearer = async (sub: string) => ({
  authorization: `Bearer ${await sign({ sub, exp: Math.floor(Date.now() / 1000) + 600 }, SECRET, "HS256")}`,
});
const admin = (path: string, method: string, body: unknown) =>
  call(writer, `/__sluice${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

let clients = 0;
/** A request of another client: a decision, which reports the change counter to its isolate. */
async function someoneElse(mf: Miniflare, path = "/api/other"): Promise<void> {
  expect((await call(mf, path, { ip: `198.51.100.${++clients}` })).status).toBe(200);
}

/**
 * Sends `path` as `headers` from `ip` to `mf` until `status` comes back (at most about two
 * seconds): another isolate reads the lists in the background once a decision has reported the change.
 */
async function untilStatus(mf: Miniflare, path: string, headers: Record<string, string>, status: number) {
  let r = await call(mf, path, { ip: "203.0.113.50", headers });
  for (let i = 0; i < 100 && r.status !== status; i++) {
    await sleep(20);
    r = await call(mf, path, { ip: "203.0.113.50", headers });
  }
  return r.status;
}

describe("a deny entry written through the admin API", () => {
  it("refuses eve's very next request on the isolate that wrote it, after another client's decision or not", async () => {
    const eve = await bearer("eve");
    // both isolates have read the lists (and eve is let in)
    for (const mf of [writer, other])
      expect((await call(mf, "/api/x", { ip: "203.0.113.50", headers: eve })).status).toBe(200);
    expect((await admin("/lists", "PUT", { kind: "deny", entry: "jwt:sub=eve", ttl: "10m" })).status).toBe(200);
    await someoneElse(writer);
    const next = await call(writer, "/api/x", { ip: "203.0.113.50", headers: eve });
    expect(next.status, next.text).toBe(403);
    // on a path no route matches, from another address: still eve
    expect((await call(writer, "/elsewhere", { ip: "192.0.2.9", headers: eve })).status).toBe(403);
    expect((await call(writer, "/api/x", { ip: "203.0.113.50", headers: await bearer("frank") })).status).toBe(200);

    // another isolate: once a decision of its has reported the change and its read has landed
    await someoneElse(other);
    expect(await untilStatus(other, "/api/x", eve, 403)).toBe(403);
  });

  it("lifted (DELETE), eve's next request on the writing isolate is let in again", async () => {
    const eve = await bearer("eve");
    expect((await admin("/lists", "DELETE", { kind: "deny", entry: "jwt:sub=eve" })).status).toBe(200);
    expect((await call(writer, "/api/x", { ip: "203.0.113.50", headers: eve })).status).toBe(200);
    await someoneElse(other);
    expect(await untilStatus(other, "/api/x", eve, 200)).toBe(200);
  });

  it("an IP entry applies at once on the writing isolate too", async () => {
    const ip = "198.18.0.77";
    expect((await call(writer, "/api/x", { ip })).status).toBe(200);
    expect((await admin("/lists", "PUT", { kind: "deny", entry: ip, ttl: "10m" })).status).toBe(200);
    expect((await call(writer, "/api/x", { ip })).status).toBe(403);
  });
});

describe("a route's degrade switch written through the admin API", () => {
  it("answers the route's very next request on the isolate that set it; back to normal at once too", async () => {
    expect((await call(writer, "/switched/a", { ip: "203.0.113.60" })).status).toBe(200);
    expect((await admin("/routes/switched/mode", "PUT", { mode: "reject", ttl: "10m" })).status).toBe(200);
    const forced = await call(writer, "/switched/a", { ip: "203.0.113.60" });
    expect(forced.status, forced.text).toBe(503);
    expect(forced.json()).toMatchObject({ mode: "reject" });
    await someoneElse(other);
    expect(await untilStatus(other, "/switched/a", {}, 503)).toBe(503);

    expect((await admin("/routes/switched/mode", "PUT", { mode: "normal" })).status).toBe(200);
    expect((await call(writer, "/switched/a", { ip: "203.0.113.60" })).status).toBe(200);
    await someoneElse(other);
    expect(await untilStatus(other, "/switched/a", {}, 200)).toBe(200);
  });
});
