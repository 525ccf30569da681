/**
 * Deny and allow entries keyed on a JWT claim (`jwt:sub=…`), replayed through the gateway in
 * workerd against a real Redis: a ban written by a limit keyed on `jwt:sub`, and entries an
 * operator adds with the admin API, must match on the banning route, on routes that read no
 * claims, and on paths no route matches; a token that does not verify must never be an allow.
 */
import { sign } from "hono/jwt";
import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack } from "../integration/stack.js";

const ADMIN = "jwt-lists-admin-token-0123456789";
const SECRET = "jwt-lists-secret-0123456789abcdef";

const SLUICE: SluiceInput = {
  key_prefix: "sjl",
  timeout_ms: 2_000,
  routes: [
    {
      name: "api",
      match: "/api/*",
      limits: [
        { name: "per-user", key: "jwt:sub", rate: 2, period: "1h", ban: { after: 3, within: "1m", for: ["10m"] } },
      ],
    },
    // reads no claims: its limit is per IP
    { name: "public", match: "/public", limits: [{ name: "per-ip", key: "ip", rate: 1, period: "1h" }] },
  ],
};

const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN, SLUICE_JWT_SECRET: SECRET } });

const now = () => Math.floor(Date.now() / 1000);
const bearer = async (claims: Record<string, unknown>, secret = SECRET) => ({
  authorization: `Bearer ${await sign({ exp: now() + 600, ...claims }, secret, "HS256")}`,
});
const get = async (path: string, ip: string, headers: Record<string, string> = {}) =>
  (await call(rig.mf, path, { ip, headers })).status;

let markers = 0;

/**
 * Adds an entry with the admin API, then waits until the Worker's isolate has read the lists again
 * (they are refreshed every 5 s): a marker IP denied in the same write is refused once it has.
 */
async function listEntry(kind: "deny" | "allow", entry: string): Promise<void> {
  const marker = `192.0.2.${++markers}`;
  for (const [k, e] of [
    [kind, entry],
    ["deny", marker],
  ]) {
    const res = await call(rig.mf, "/__sluice/lists", {
      method: "PUT",
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify({ kind: k, entry: e, ttl: "10m" }),
    });
    expect(res.status, res.text).toBeLessThan(300);
  }
  for (let i = 0; i < 100 && (await get("/elsewhere", marker)) !== 403; i++) await sleep(100);
  expect(await get("/elsewhere", marker)).toBe(403);
}

describe("a ban on a limit keyed on jwt:sub", () => {
  it("refuses the banned subject with 403 on the banning route, on a route that reads no claims, and off every route", async () => {
    const alice = await bearer({ sub: "ban-alice" });
    expect(await get("/api/items", "198.51.100.1", alice)).toBe(200);
    expect(await get("/api/items", "198.51.100.1", alice)).toBe(200);
    for (let i = 0; i < 3; i++) expect(await get("/api/items", "198.51.100.1", alice)).toBe(429);
    // the ban is written after the third refusal's response
    let status = 429;
    for (let i = 0; i < 40 && status === 429; i++) {
      await sleep(100);
      status = await get("/api/items", "198.51.100.1", alice);
    }
    expect(status).toBe(403);
    // another address changes nothing: the ban names the subject
    expect(await get("/api/items", "198.51.100.2", alice)).toBe(403);
    expect(await get("/public", "198.51.100.3", alice)).toBe(403);
    expect(await get("/unrouted", "198.51.100.4", alice)).toBe(403);
    // somebody else is limited as before
    expect(await get("/api/items", "198.51.100.1", await bearer({ sub: "ban-bob" }))).toBe(200);

    const listed = (await call(rig.mf, "/__sluice/lists", { headers: { authorization: `Bearer ${ADMIN}` } })).json();
    expect((listed.entries as Array<{ entry: string }>).map((e) => e.entry)).toContain("jwt:sub=ban-alice");
  });
});

describe("deny entries an operator adds", () => {
  it("a jwt:sub deny entry refuses that subject everywhere, whatever its IP, and nobody else", async () => {
    await listEntry("deny", "jwt:sub=mallory");
    const mallory = await bearer({ sub: "mallory" });
    expect(await get("/public", "198.51.100.10", mallory)).toBe(403);
    expect(await get("/api/x", "198.51.100.11", mallory)).toBe(403);
    expect(await get("/elsewhere", "198.51.100.12", mallory)).toBe(403);
    expect(await get("/public", "198.51.100.13", await bearer({ sub: "carol" }))).toBe(200);
    expect(await get("/elsewhere", "198.51.100.13")).toBe(200);
  });

  it("a token that no longer verifies (expired, or signed with another key) does not lift the entry", async () => {
    await listEntry("deny", "jwt:sub=mallory2");
    const expired = {
      authorization: `Bearer ${await sign({ sub: "mallory2", exp: now() - 60 }, SECRET, "HS256")}`,
    };
    const resigned = await bearer({ sub: "mallory2" }, "some-other-key-0123456789abcdef");
    for (const headers of [expired, resigned]) {
      expect(await get("/public", "198.51.100.20", headers)).toBe(403);
      expect(await get("/elsewhere", "198.51.100.21", headers)).toBe(403);
      expect(await get("/api/x", "198.51.100.22", headers)).toBe(403);
    }
    // a token that does not verify and names nobody listed: the route that reads claims still says 401
    const stranger = await bearer({ sub: "stranger" }, "some-other-key-0123456789abcdef");
    expect(await get("/api/x", "198.51.100.23", stranger)).toBe(401);
    expect(await get("/elsewhere", "198.51.100.23", stranger)).toBe(200);
  });
});

describe("allow entries an operator adds", () => {
  it("a jwt:sub allow entry skips the limits of a route that reads no claims, for a verified token only", async () => {
    await listEntry("allow", "jwt:sub=vip");
    const vip = await bearer({ sub: "vip" });
    // /public allows one request an hour per IP: the allowed subject is not counted
    for (let i = 0; i < 4; i++) expect(await get("/public", "198.51.100.30", vip)).toBe(200);
    for (let i = 0; i < 4; i++) expect(await get("/api/x", "198.51.100.30", vip)).toBe(200);

    // the same claim in a token sluice cannot verify is no allow entry
    const forged = await bearer({ sub: "vip" }, "forger-key-0123456789abcdef0123");
    expect(await get("/public", "198.51.100.31", forged)).toBe(200);
    expect(await get("/public", "198.51.100.31", forged)).toBe(429);
    expect(await get("/api/x", "198.51.100.31", forged)).toBe(401);
  });
});
