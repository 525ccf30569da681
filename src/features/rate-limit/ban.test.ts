import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { background, from, middlewareRig, type RigOptions } from "../../../test/support/middleware-rig.js";
import { hashIdentifier } from "../../identity/hash.js";
import { Runtime, accessLists, rateLimit, type RateLimitOptions, type SluiceEnv } from "../../index.js";
import { banLevelKey, banRefusalsKey } from "../../store/layout.js";
import { listsOf } from "../access/lists.js";
import { StoreVersions } from "../../store/versions.js";

/** Bans through rateLimit() with accessLists() in front, in Node, against a real Redis behind the Upstash-REST bridge. */
const rig = middlewareRig("ban");
const { db } = rig;

/** One token an hour, so every request after the first is refused; banned after 3 refusals. */
const LIMITS: RateLimitOptions["limits"] = [
  {
    name: "per-ip",
    rate: 1,
    period: "1h",
    burst: 1,
    lease: false,
    ban: { after: 3, within: "1m", for: ["2m", "10m"] },
  },
];

/** The deny list, then the limits, then a handler that says ok: an isolate of its own (`opts.runtime`). */
function gateway(opts: RigOptions): Hono<SluiceEnv> {
  const app = new Hono<SluiceEnv>();
  app.use(accessLists(opts));
  app.use(rateLimit({ ...opts, name: "login", limits: LIMITS }));
  app.all("*", (c) => c.text("ok"));
  return app;
}

/** Sends one request from `ip` and waits for what it deferred (counting a refusal, writing a ban). */
async function send(app: Hono<SluiceEnv>, ip: string): Promise<number> {
  const bg = background();
  const res = await app.request("/login", from(ip), {}, bg.ctx);
  await bg.settled();
  return res.status;
}

interface Stored {
  kind: string;
  entry: string;
  until: number;
  note: string;
}

async function denyEntry(prefix: string, ip: string): Promise<Stored | null> {
  const raw = await db.redis.hget<string>(`${prefix}:lists`, `deny:${ip}`);
  return raw === null ? null : (JSON.parse(raw) as Stored);
}

describe("rateLimit() with ban", () => {
  it("bans a client after `after` refusals, for the first duration, and leaves other clients alone", async () => {
    const opts = rig.options();
    const app = gateway(opts);
    const ip = "198.51.100.10";
    expect(await send(app, "198.51.100.11")).toBe(200); // the lists are read once, before anyone is banned
    expect(await send(app, ip)).toBe(200);
    // the first refusal is Redis's, the next two the blocked-bucket cache's: each counts
    for (let i = 0; i < 2; i++) expect(await send(app, ip)).toBe(429);
    expect(await denyEntry(opts.key_prefix, ip)).toBeNull();
    const before = Date.now();
    expect(await send(app, ip)).toBe(429); // the third refusal bans
    const after = Date.now();

    // this isolate enforces it at once, without waiting for its next read of the lists
    expect(await send(app, ip)).toBe(403);
    expect(await send(app, "198.51.100.12")).toBe(200);
    expect(await send(app, "198.51.100.11")).toBe(429); // limited, as before: not banned
    // every other isolate reads it from the lists hash, as an entry added through the admin API
    expect(await send(gateway({ ...opts, runtime: new Runtime() }), ip)).toBe(403);

    const stored = await denyEntry(opts.key_prefix, ip);
    expect(stored).toMatchObject({ kind: "deny", entry: ip, note: 'ban by route "login", limit "per-ip", level 1' });
    expect(stored!.until).toBeGreaterThanOrEqual(before + 120_000);
    expect(stored!.until).toBeLessThanOrEqual(after + 120_000);
    const hash = await hashIdentifier(ip);
    // the count starts again; the level is kept a day (more than twice the longest ban)
    expect(await db.redis.exists(banRefusalsKey(opts.key_prefix, "login", "per-ip", hash))).toBe(0);
    expect(await db.redis.get(banLevelKey(opts.key_prefix, "login", "per-ip", hash))).toBe("1");
    const ttl = await db.redis.pttl(banLevelKey(opts.key_prefix, "login", "per-ip", hash));
    expect(ttl).toBeGreaterThan(86_400_000 - 60_000);
    expect(ttl).toBeLessThanOrEqual(86_400_000);
  });

  it("bans the same client for the next duration the second time, and the last one after that", async () => {
    const opts = rig.options();
    const ip = "198.51.100.20";
    const durations: number[] = [];
    for (const level of [1, 2, 3]) {
      // a fresh isolate each time, and the entry gone (run out, or lifted by an operator)
      const app = gateway({ ...opts, runtime: new Runtime() });
      await db.redis.hdel(`${opts.key_prefix}:lists`, `deny:${ip}`);
      const before = Date.now();
      const statuses: number[] = [];
      while (statuses.length < 5 && !(await denyEntry(opts.key_prefix, ip))) statuses.push(await send(app, ip));
      // the bucket stays empty (one token an hour): three refusals each time
      expect(statuses.slice(-3), `level ${level}`).toEqual([429, 429, 429]);
      expect(await send(app, ip)).toBe(403);
      const stored = await denyEntry(opts.key_prefix, ip);
      expect(stored?.note).toBe(`ban by route "login", limit "per-ip", level ${level}`);
      durations.push(Math.round((stored!.until - before) / 60_000));
    }
    expect(durations).toEqual([2, 10, 10]);
  });

  it("does not escalate on refusals from isolates that have not read the ban yet", async () => {
    const opts = rig.options();
    const ip = "198.51.100.30";
    const banning = gateway({ ...opts, runtime: new Runtime() });
    // another isolate, which reads the lists now (before the ban) and not again for a while: its
    // lists do not hear the version its decisions report (as an isolate whose reply crossed the ban's write)
    const laggingRuntime = new Runtime();
    listsOf(laggingRuntime, new StoreVersions());
    const lagging = gateway({ ...opts, runtime: laggingRuntime });
    expect(await send(lagging, "198.51.100.31")).toBe(200);
    for (let i = 0; i < 4; i++) await send(banning, ip);
    expect(await send(banning, ip)).toBe(403);
    const first = await denyEntry(opts.key_prefix, ip);
    expect(first?.note).toContain("level 1");
    // it keeps refusing the client meanwhile: twice `after` refusals, neither escalating nor rewriting the ban
    for (let i = 0; i < 6; i++) expect(await send(lagging, ip)).toBe(429);
    expect(await denyEntry(opts.key_prefix, ip)).toEqual(first);
    const hash = await hashIdentifier(ip);
    expect(await db.redis.get(banLevelKey(opts.key_prefix, "login", "per-ip", hash))).toBe("1");
  });
});
