/**
 * A dashboard session cookie must stop working when its operator signs out and when it goes
 * unused: the attacks replay a stolen cookie with raw HTTP after sign-out, and after the idle
 * window, and both must get the 401 a request without a session gets.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import { RespClient } from "@sluice/dev";
import { issueSession } from "../../src/admin/auth.js";
import type { SluiceInput } from "../../src/config/schema.js";
import { hashIdentifier } from "../../src/identity/hash.js";
import { sleep, useStack, type RedisStack } from "../integration/stack.js";
import { portOf, rawRequest, type RawResponse } from "../support/raw-http.js";

const ADMIN = "dashboard-session-token-0123456789";
const PREFIX = "dss";
/** Short, so that the idle expiry can be replayed in real time. */
const IDLE_MS = 3_000;
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  timeout_ms: 1_000,
  admin_session_idle: `${IDLE_MS}ms`,
  routes: [{ name: "api", match: "/api/*", limits: [{ name: "per-ip", rate: 100, period: "1h" }] }],
};

const rig = useStack({ sluice: SLUICE, listen: true, bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
let mf: Miniflare;
let stack: RedisStack;
let port: number;
beforeAll(async () => {
  ({ mf, stack } = rig);
  port = portOf(await mf.ready);
});

/** Signs in with the login form, as a browser would, and gives the session cookie (`name=value`). */
async function signIn(worker: Miniflare = mf): Promise<string> {
  const res = await worker.dispatchFetch("http://sluice.test/__sluice/login", {
    method: "POST",
    headers: { "CF-Connecting-IP": "198.51.100.40", "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ token: ADMIN }).toString(),
    redirect: "manual",
  });
  await res.text();
  expect(res.status).toBe(303);
  const setCookie = res.headers.get("set-cookie") ?? "";
  const cookie = /^(sluice_admin=\d{13}\.[0-9a-f]{32}\.[0-9a-f]{64});/.exec(setCookie)?.[1];
  expect(cookie, setCookie).toBeDefined();
  for (const attribute of ["Path=/__sluice", "HttpOnly", "SameSite=Strict"]) expect(setCookie).toContain(attribute);
  return cookie as string;
}

/** The cookie replayed on a bare connection, as an attacker holding it would send it. */
function replay(cookie: string, method = "GET", target = "/__sluice/api/dashboard", json?: unknown) {
  return rawRequest({
    port,
    method,
    target,
    headers: [
      ["Cookie", cookie],
      ["CF-Connecting-IP", "203.0.113.66"],
      ...(json === undefined ? [] : ([["Content-Type", "application/json"]] as Array<[string, string]>)),
    ],
    body: json === undefined ? undefined : JSON.stringify(json),
  });
}

const signOut = (cookie: string) => replay(cookie, "POST", "/__sluice/logout", {});
const show = (r: RawResponse) => `${r.status} ${r.text.slice(0, 200)}`;

/** The session's record in Redis: its remaining TTL (ms; -2 when gone). */
async function recordTtl(cookie: string): Promise<number> {
  const id = cookie.split("=")[1]?.split(".")[1] ?? "";
  const client = RespClient.fromUrl(stack.redis.url);
  try {
    return Number(await client.send(["PTTL", `${PREFIX}:admin-session:${await hashIdentifier(id)}`]));
  } finally {
    client.close();
  }
}

describe("sign-out", () => {
  it("revokes the session server-side: its cookie replayed afterwards is refused", async () => {
    const cookie = await signIn();
    const other = await signIn();
    expect((await replay(cookie)).status).toBe(200);

    // the sign-out takes the same CSRF guard as any change: a cross-site form (no JSON body) cannot sign anybody out
    const formPost = await rawRequest({
      port,
      method: "POST",
      target: "/__sluice/logout",
      headers: [
        ["Cookie", cookie],
        ["Content-Type", "application/x-www-form-urlencoded"],
      ],
      body: "x=1",
    });
    expect(formPost.status).toBe(415);
    expect((await replay(cookie)).status).toBe(200);

    const out = await signOut(cookie);
    expect(out.status, show(out)).toBe(200);
    expect(out.json()).toEqual({ signed_out: true });
    expect(out.headers["set-cookie"]).toMatch(/^sluice_admin=;.*Max-Age=0/);
    expect(await recordTtl(cookie)).toBe(-2);

    // the stolen copy of the cookie, replayed: every door refuses it
    const read = await replay(cookie);
    expect(read.status, show(read)).toBe(401);
    expect(
      (await replay(cookie, "PUT", "/__sluice/lists", { kind: "deny", entry: "192.0.2.1", ttl: "1h" })).status,
    ).toBe(401);
    const page = await replay(cookie, "GET", "/__sluice/");
    expect(page.text).toContain('name="token"'); // the login form, not the dashboard
    expect((await replay(cookie, "GET", "/__sluice/health")).json()).toEqual({ status: "up" });
    expect((await signOut(cookie)).status).toBe(401); // nothing left to sign out

    // another session of the same operator is its own: it stays signed in
    expect((await replay(other)).status).toBe(200);
  });

  it("refuses a well-signed cookie that no sign-in recorded", async () => {
    const forged = await issueSession(ADMIN);
    const r = await replay(`sluice_admin=${forged.value}`);
    expect(r.status, show(r)).toBe(401);
  });
});

describe("idle expiry", () => {
  it("keeps a session in use alive past the idle window, and refuses it once unused for longer", async () => {
    const cookie = await signIn();
    const ttl = await recordTtl(cookie);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(IDLE_MS);
    // used every half window for two windows: each use renews it (sliding)
    for (let i = 0; i < 4; i++) {
      await sleep(IDLE_MS / 2);
      const r = await replay(cookie);
      expect(r.status, `use ${i}: ${show(r)}`).toBe(200);
    }
    await sleep(IDLE_MS + 1_000);
    const idle = await replay(cookie);
    expect(idle.status, show(idle)).toBe(401);
    expect(await recordTtl(cookie)).toBe(-2);
  }, 30_000);
});

describe("without the session store", () => {
  it("refuses sessions (503) rather than admitting a cookie it cannot check", async () => {
    const cookie = await signIn();
    const cut = rig.worker({
      sluice: { ...SLUICE, timeout_ms: 200 },
      bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
      redisRestUrl: "http://127.0.0.1:9/",
    });
    const res = await cut.dispatchFetch("http://sluice.test/__sluice/api/dashboard", {
      headers: { cookie, "CF-Connecting-IP": "203.0.113.67" },
    });
    const body = await res.text();
    expect(res.status, body).toBe(503);
    expect(body).toContain("Authorization: Bearer");
    const health = await cut.dispatchFetch("http://sluice.test/__sluice/health", { headers: { cookie } });
    expect(await health.json()).toEqual({ status: "up" });
  }, 30_000);
});
