import { describe, expect, it } from "vitest";
import { countedApp, from, middlewareRig } from "../../../test/support/middleware-rig.js";
import { accessLists, type SharedOptions } from "../../index.js";

/** accessLists() in an app of its own, in Node, against a real Redis behind the Upstash-REST bridge. */
const { db, options } = middlewareRig("acl");

/**
 * Writes an entry as the admin API's `PUT /__sluice/lists` does (src/admin/lists.ts): one hash
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
