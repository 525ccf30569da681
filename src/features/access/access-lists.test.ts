import { sign } from "hono/jwt";
import { describe, expect, it, vi } from "vitest";
import { countedApp, from, middlewareRig } from "../../../test/support/middleware-rig.js";
import { accessLists, sluice, type SharedOptions } from "../../index.js";

/** accessLists() in an app of its own, in Node, against a real Redis behind the Upstash-REST bridge. */
const { db, options } = middlewareRig("acl");

/**
 * Writes an entry as the admin API's `PUT /__sluice/lists` does (src/features/access/admin.ts): one hash
 * `{key_prefix}:lists`, field `{kind}:{entry}`, the JSON entry with its expiry as the value.
 */
async function listEntry(prefix: string, kind: "deny" | "allow", entry: string, ttlMs = 600_000): Promise<void> {
  await db.redis.hset(`${prefix}:lists`, {
    [`${kind}:${entry}`]: JSON.stringify({ kind, entry, until: Date.now() + ttlMs }),
  });
}

/** GET answers "hello"; `calls` counts the times the handler ran. */
const appWith = (opts: SharedOptions) => countedApp(accessLists(opts), (c) => c.text("hello"), { method: "GET" });

describe("accessLists()", () => {
  it("refuses a denied IP with 403 and lets everybody else through", async () => {
    const opts = options();
    await listEntry(opts.key_prefix, "deny", "198.51.100.66");
    const { app, calls } = appWith(opts);
    const denied = await app.request("/x", from("198.51.100.66"));
    expect(denied.status).toBe(403);
    expect(denied.headers.get("content-type")).toBe("application/problem+json");
    expect(denied.headers.get("Sluice-Decision")).toBe("reject");
    expect(denied.headers.get("Sluice-Region")).toBe("home");
    const body = (await denied.json()) as { type: string; title: string; status: number };
    expect(body).toMatchObject({ type: "/__sluice/problems/forbidden", title: "Forbidden", status: 403 });
    expect(calls.n).toBe(0);

    const other = await app.request("/x", from("198.51.100.67"));
    expect(other.status).toBe(200);
    expect(other.headers.get("Sluice-Decision")).toBe("allow");
    expect(await other.text()).toBe("hello");
    expect(calls.n).toBe(1);
  });

  it("denies a CIDR range and a <key part>=<value> entry", async () => {
    const opts = options();
    await listEntry(opts.key_prefix, "deny", "203.0.113.0/24");
    await listEntry(opts.key_prefix, "deny", "header:x-api-key=leaked-key");
    const { app, calls } = appWith(opts);
    expect((await app.request("/x", from("203.0.113.200"))).status).toBe(403);
    expect((await app.request("/x", from("198.51.100.68", { "x-api-key": "leaked-key" }))).status).toBe(403);
    expect((await app.request("/x", from("198.51.100.68", { "x-api-key": "good-key" }))).status).toBe(200);
    expect((await app.request("/x", from("203.0.114.1"))).status).toBe(200);
    expect(calls.n).toBe(2);
  });

  it("ignores an entry whose time has passed", async () => {
    const opts = options();
    await listEntry(opts.key_prefix, "deny", "198.51.100.69", -1_000);
    const { app, calls } = appWith(opts);
    expect((await app.request("/x", from("198.51.100.69"))).status).toBe(200);
    expect(calls.n).toBe(1);
  });

  it("reads the lists under its own key_prefix only", async () => {
    const opts = options();
    await listEntry(`${opts.key_prefix}-other`, "deny", "198.51.100.70");
    const { app } = appWith(opts);
    expect((await app.request("/x", from("198.51.100.70"))).status).toBe(200);
  });
});

describe("entries keyed on a JWT claim", () => {
  const SECRET = "acl-jwt-secret-0123456789abcdef";
  const env = { SLUICE_JWT_SECRET: SECRET };
  const bearer = async (sub: string, secret = SECRET) => ({
    authorization: `Bearer ${await sign({ sub, exp: Math.floor(Date.now() / 1000) + 600 }, secret, "HS256")}`,
  });

  it("accessLists() verifies the token itself: a jwt:sub deny entry refuses that subject, another passes", async () => {
    const opts = options();
    await listEntry(opts.key_prefix, "deny", "jwt:sub=mallory");
    const { app, calls } = appWith(opts);
    expect((await app.request("/x", from("198.51.100.80", await bearer("mallory")), env)).status).toBe(403);
    expect((await app.request("/x", from("198.51.100.80", await bearer("carol")), env)).status).toBe(200);
    // with no key to verify tokens with, the claim a token states still meets a deny entry, and it is logged
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      expect((await app.request("/x", from("198.51.100.80", await bearer("mallory")))).status).toBe(403);
      expect(logged.mock.calls.map((a) => String(a[0])).join()).toContain('"event":"lists_jwt_unverifiable"');
    } finally {
      logged.mockRestore();
    }
    expect(calls.n).toBe(1);
  });

  it("sluice(config) matches jwt: entries on a route whose limits read no claims, with no verifyJwt() before it", async () => {
    const opts = options();
    await listEntry(opts.key_prefix, "deny", "jwt:sub=mallory");
    await listEntry(opts.key_prefix, "allow", "jwt:sub=vip");
    const { redis, runtime, key_prefix, timeout_ms } = opts;
    const limits = [{ name: "per-ip", key: "ip", rate: 1, period: "1h" }];
    const gateway = sluice(
      { key_prefix, timeout_ms, routes: [{ name: "page", match: "/page", limits }] },
      { redis, runtime },
    );
    const { app } = countedApp(gateway, (c) => c.text("ok"));
    expect((await app.request("/page", from("198.51.100.81", await bearer("mallory")), env)).status).toBe(403);
    expect((await app.request("/other", from("198.51.100.81", await bearer("mallory")), env)).status).toBe(403);
    const vip = await bearer("vip");
    for (let i = 0; i < 3; i++) expect((await app.request("/page", from("198.51.100.82", vip), env)).status).toBe(200);
    // the vip claim in a token signed with another key is no allow entry
    const forged = await bearer("vip", "another-key-0123456789abcdef0123");
    expect((await app.request("/page", from("198.51.100.83", forged), env)).status).toBe(200);
    expect((await app.request("/page", from("198.51.100.83", forged), env)).status).toBe(429);
  });
});
