/**
 * Issue 29, finding 5: the `auto` principal must not depend on the clock. With a `[jwt]` table an
 * `auto` principal is the token's `sub`; on main it was the `sub` only while the time claims let
 * the token in, and the `Authorization` hash otherwise, so one token named two principals: a
 * token that expired during a slow call made its retry (same token, same key) a second order
 * under another principal, and a token whose `iat` was a second ahead flipped the other way.
 * Replayed through the Worker in workerd against a real Redis. No race with the clock: each token
 * is signed with the time claim it needs, and the test waits until the clock is past it.
 */
import { sign } from "hono/jwt";
import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack } from "../integration/stack.js";

const ADMIN = "principal-clock-admin-token-0123456789";
const SECRET = "principal-clock-hmac-secret-0123456789";

const SLUICE: SluiceInput = {
  key_prefix: "pck",
  // about who a request is, not latency: a loaded machine must not turn claims into 503s
  timeout_ms: 5_000,
  jwt: {},
  routes: [
    { name: "orders", match: "/orders", idempotency: {} },
    { name: "early", match: "/early", idempotency: {} },
    { name: "sess", match: "/sess", session: { key: "header:x-session-id" } },
    // keyed on the token: its time claims decide admission
    {
      name: "verified",
      match: "/verified",
      idempotency: {},
      limits: [{ name: "per-user", key: "jwt:sub", rate: 1_000, period: "1m" }],
    },
  ],
};

const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_JWT_SECRET: SECRET, SLUICE_ADMIN_TOKEN: ADMIN } });

const nowS = () => Math.floor(Date.now() / 1000);
const bearer = async (claims: Record<string, unknown>, secret = SECRET) =>
  `Bearer ${await sign(claims, secret, "HS256")}`;
const post = (path: string, ip: string, body: string, headers: Record<string, string>) =>
  call(rig.mf, path, { method: "POST", ip, body, headers: { "content-type": "application/json", ...headers } });
const seenAt = (path: string, marker: string) =>
  rig.origin.seen.filter((s) => s.path === path && s.body.includes(marker));

/** Waits (polling, capped at 20 s) until `done` holds. */
async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 400 && !done(); i++) await sleep(50);
  expect(done()).toBe(true);
}

/** The answer is stored after the response (waitUntil): asks until the replay comes back. */
async function untilReplayed(send: () => ReturnType<typeof post>) {
  let r = await send();
  for (let i = 0; i < 60 && r.headers.get("idempotent-replayed") !== "true"; i++) {
    await sleep(50);
    r = await send();
  }
  return r;
}

async function ledgerPrincipals(route: string, since: number): Promise<Set<string>> {
  const r = await call(rig.mf, `/__sluice/ledger?route=${route}&since=${since}`, {
    headers: { authorization: `Bearer ${ADMIN}` },
  });
  expect(r.status).toBe(200);
  const entries = r.json().entries as Array<{ principal?: string }>;
  expect(entries.length).toBeGreaterThan(0);
  return new Set(entries.map((e) => e.principal ?? ""));
}

describe('principal = "auto" with JWTs verified', () => {
  it("a token that expires during a slow call: its retry (same token, same key) is the same principal: 409, then the replay", async () => {
    const started = Date.now();
    const exp = nowS() + 3;
    const token = await bearer({ sub: "clock-alice", exp });
    const body = '{"order":"clock-1"}';
    const key = { authorization: token, "idempotency-key": "clock-1" };
    // the origin answers four seconds after the token expires: room for the retry on a loaded machine
    const first = post("/orders", "198.51.100.1", body, {
      ...key,
      "x-demo-delay": String(exp * 1000 - Date.now() + 4_000),
    });
    await until(() => seenAt("/orders", "clock-1").length === 1 && Date.now() >= exp * 1000 + 100);
    // the token has expired: the retry while the first runs meets its claim
    const during = await post("/orders", "203.0.113.1", body, key);
    expect(during.status, during.text).toBe(409);
    expect((await first).status).toBe(200);
    const after = await untilReplayed(() => post("/orders", "203.0.113.1", body, key));
    expect(after.headers.get("sluice-decision")).toBe("replay");
    expect(seenAt("/orders", "clock-1")).toHaveLength(1);
    // one token, one principal in the ledger
    expect((await ledgerPrincipals("orders", started)).size).toBe(1);
  });

  it("a token whose iat is ahead of the clock is its sub from the first call: the retry once the clock caught up replays", async () => {
    const iat = nowS() + 2;
    const token = await bearer({ sub: "clock-bob", iat, exp: iat + 3_600 });
    const body = '{"order":"clock-2"}';
    const key = { authorization: token, "idempotency-key": "clock-2" };
    expect((await post("/early", "198.51.100.2", body, key)).status).toBe(200);
    await until(() => Date.now() >= iat * 1000 + 100);
    const retry = await untilReplayed(() => post("/early", "198.51.100.2", body, key));
    expect(retry.headers.get("sluice-decision")).toBe("replay");
    expect(seenAt("/early", "clock-2")).toHaveLength(1);
  });

  it("an expired token's session is its subject's: a call under it waits for the subject's call in flight", async () => {
    const session = { "x-session-id": "clock-s1" };
    const live = await bearer({ sub: "clock-carol", exp: nowS() + 600 });
    const expired = await bearer({ sub: "clock-carol", exp: nowS() - 60 });
    const slow = post("/sess", "198.51.100.3", '{"call":"clock-s-first"}', {
      authorization: live,
      "x-demo-delay": "3000",
      ...session,
    });
    await until(() => seenAt("/sess", "clock-s-first").length === 1);
    const second = await post("/sess", "203.0.113.3", '{"call":"clock-s-second"}', {
      authorization: expired,
      ...session,
    });
    expect(second.status, second.text).toBe(409);
    expect((await slow).status).toBe(200);
    expect(seenAt("/sess", "clock-s-second")).toHaveLength(0);
  });

  it("a token whose signature does not verify never names the sub it claims, expired or not", async () => {
    const body = '{"order":"clock-5"}';
    const alice = await bearer({ sub: "clock-alice", exp: nowS() + 600 });
    expect(
      (await post("/orders", "198.51.100.5", body, { authorization: alice, "idempotency-key": "clock-5" })).status,
    ).toBe(200);
    const forged = await bearer({ sub: "clock-alice", exp: nowS() - 60 }, "not-the-secret-at-all-0123456789");
    const r = await post("/orders", "198.51.100.5", body, { authorization: forged, "idempotency-key": "clock-5" });
    expect(r.status).toBe(200);
    expect(r.headers.get("idempotent-replayed")).toBeNull();
    expect(seenAt("/orders", "clock-5")).toHaveLength(2);
  });

  it("where the route keys on the token, the time claims still decide admission: an expired token is a 401", async () => {
    const expired = await bearer({ sub: "clock-dave", exp: nowS() - 60 });
    const early = await bearer({ sub: "clock-dave", iat: nowS() + 600, exp: nowS() + 3_600 });
    for (const authorization of [expired, early]) {
      const r = await post("/verified", "198.51.100.4", '{"order":"clock-4"}', {
        authorization,
        "idempotency-key": "clock-4",
      });
      expect(r.status, r.text).toBe(401);
    }
    expect(seenAt("/verified", "clock-4")).toHaveLength(0);
  });
});
