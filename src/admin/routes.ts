import type { Hono } from "hono";
import { z } from "zod";
import { listsKey, validEntry, type ListEntry, parseEntries } from "../access/lists.js";
import type { Config } from "../config/index.js";
import { parseDuration } from "../config/duration.js";
import { exactnessProblem } from "../config/exactness.js";
import type { Env } from "../env.js";
import { peekBucket } from "../limiter/decide.js";
import { asHash, maybeFlush, metricKeys, minuteOf, prometheus } from "../metrics/index.js";
import { allRegions, offPathStore } from "../region/index.js";
import { problem } from "../shed/problem.js";
import type { Store } from "../store/redis.js";
import { bucketAddress, factsFromParams } from "./identity.js";
import { identify } from "../keys/identify.js";
import { bucketHash } from "../limiter/buckets.js";

/** `authorised`: the request carried the admin token or a valid session (health says more then). */
export type AdminEnv = { Bindings: Env; Variables: { config: Config; authorised: boolean } };

const ttl = z.string().refine((t) => parseDuration(t) !== undefined, 'must be a duration like "10m"');
const overrideBody = z
  .object({
    route: z.string(),
    limit: z.string(),
    rate: z.number().int().positive().max(1_000_000_000),
    burst: z.number().int().positive().max(1_000_000_000).optional(),
    period: ttl.optional(),
    /** The client, as key parts (`{ "ip": "203.0.113.9" }`); absent: everybody. */
    identity: z.record(z.string(), z.string()).optional(),
    region: z.string().optional(),
    ttl,
  })
  .strict();
const listBody = z
  .object({
    kind: z.enum(["deny", "allow"]),
    entry: z.string().min(1).max(300).refine(validEntry, "must be an IP, a CIDR range, or <key part>=<value>"),
    ttl,
    routes: z.array(z.string()).optional(),
    note: z.string().max(200).optional(),
  })
  .strict();

function bad(error: z.ZodError | undefined): Response {
  const issue = error?.issues[0];
  return problem({ status: 400, title: "Invalid request", detail: issue ? `${issue.path.join(".") || "body"}: ${issue.message}` : "the body is not JSON" });
}

/** Every distinct Redis of the deployment (regions without secrets share the home one). */
function distinctStores(config: Config, env: Env): Store[] {
  const seen = new Map<string, Store>();
  for (const r of allRegions(config)) {
    const s = offPathStore(env, config, r);
    if (s && !seen.has(s.id)) seen.set(s.id, s);
  }
  return [...seen.values()];
}

/** The admin routes behind the token: configuration, buckets, overrides, lists, metrics. */
export function mountAdminRoutes(admin: Hono<AdminEnv>): void {
  admin.get("/config", (c) => {
    const config = c.get("config");
    const origin = new URL(config.originUrl.href);
    origin.username = "";
    origin.password = "";
    const routes = config.routes.map(({ pattern: _pattern, ...r }) => r);
    return c.json({ ...config, originUrl: origin.href, routes, secrets: "redacted: Upstash URLs and tokens, SLUICE_ADMIN_TOKEN and JWT secrets are never shown" });
  });

  admin.get("/buckets/:route/:limit", async (c) => {
    const a = await bucketAddress(c.get("config"), c.env, c.req.param("route"), c.req.param("limit"), new URL(c.req.url).searchParams);
    if (typeof a === "string") return problem({ status: 404, title: "No such bucket", detail: a });
    const o = await peekBucket({ limit: a.limit, key: a.key, store: a.store });
    return c.json({ route: a.route.name, limit: a.limit.name, region: a.region, key: a.key, remaining: o.remaining, would_allow: o.allowed, retry_after_ms: o.retryAfterMs, reset_ms: o.resetMs });
  });

  admin.delete("/buckets/:route/:limit", async (c) => {
    const a = await bucketAddress(c.get("config"), c.env, c.req.param("route"), c.req.param("limit"), new URL(c.req.url).searchParams);
    if (typeof a === "string") return problem({ status: 404, title: "No such bucket", detail: a });
    await a.store.redis.del(a.key);
    return c.json({ reset: a.key, note: "isolates that cached this bucket as closed keep refusing until its retry time" });
  });

  admin.put("/overrides", async (c) => {
    const config = c.get("config");
    const parsed = overrideBody.safeParse(await c.req.json().catch(() => undefined));
    if (!parsed.success) return bad(parsed.error);
    const o = parsed.data;
    const limit = config.routes.find((r) => r.name === o.route)?.limits.find((l) => l.name === o.limit);
    if (!limit) return problem({ status: 404, title: "No such limit", detail: `no limit "${o.limit}" in a route "${o.route}"` });
    const periodMs = o.period ? (parseDuration(o.period) as number) : limit.period;
    const inexact = exactnessProblem({ algorithm: limit.algorithm, rate: o.rate, burst: o.burst ?? o.rate, periodMs });
    // the burst defaults to the rate: name the field the body actually has
    if (inexact) return problem({ status: 400, title: "Invalid request", detail: `${inexact.field === "burst" && o.burst === undefined ? "rate" : inexact.field}: ${inexact.message}` });
    const field = await overrideField(config, limit, o.limit, o.identity, o.region);
    if (typeof field === "string" && field.startsWith("!")) return problem({ status: 400, title: "Invalid request", detail: field.slice(1) });
    const ms = parseDuration(o.ttl) as number;
    const until = Date.now() + ms;
    const value = `${o.rate}:${o.burst ?? o.rate}:${periodMs}:${until}`;
    const key = `${config.key_prefix}:${o.route}:overrides`;
    await Promise.all(
      distinctStores(config, c.env).map(async (s) => {
        await s.redis.hset(key, { [field]: value });
        const left = await s.redis.pttl(key);
        if (left < ms) await s.redis.pexpire(key, ms);
      }),
    );
    return c.json({ ok: true, key, field, value, expires_at: new Date(until).toISOString() });
  });

  admin.get("/overrides", async (c) => {
    const config = c.get("config");
    const home = offPathStore(c.env, config);
    const out: Array<Record<string, unknown>> = [];
    for (const r of config.routes) {
      const h = home ? asHash(await home.redis.hgetall(`${config.key_prefix}:${r.name}:overrides`)) : {};
      for (const [field, v] of Object.entries(h)) {
        const [rate, burst, period, until] = v.split(":").map(Number);
        if ((until ?? 0) > Date.now()) out.push({ route: r.name, field, rate, burst, period_ms: period, expires_at: new Date(until ?? 0).toISOString() });
      }
    }
    return c.json({ overrides: out });
  });

  admin.delete("/overrides", async (c) => {
    const config = c.get("config");
    const body = z.object({ route: z.string(), limit: z.string(), identity: z.record(z.string(), z.string()).optional(), region: z.string().optional() }).strict().safeParse(await c.req.json().catch(() => undefined));
    if (!body.success) return bad(body.error);
    const limit = config.routes.find((r) => r.name === body.data.route)?.limits.find((l) => l.name === body.data.limit);
    if (!limit) return problem({ status: 404, title: "No such limit", detail: "no such route or limit" });
    const field = await overrideField(config, limit, body.data.limit, body.data.identity, body.data.region);
    await Promise.all(distinctStores(config, c.env).map((s) => s.redis.hdel(`${config.key_prefix}:${body.data.route}:overrides`, field)));
    return c.json({ ok: true, removed: field });
  });

  admin.put("/lists", async (c) => {
    const config = c.get("config");
    const parsed = listBody.safeParse(await c.req.json().catch(() => undefined));
    if (!parsed.success) return bad(parsed.error);
    const b = parsed.data;
    const home = offPathStore(c.env, config);
    if (!home) return problem({ status: 503, title: "Store unavailable", detail: "no Redis for the home region" });
    const entry: ListEntry = { kind: b.kind, entry: b.entry, until: Date.now() + (parseDuration(b.ttl) as number), ...(b.routes ? { routes: b.routes } : {}), ...(b.note ? { note: b.note } : {}) };
    await home.redis.hset(listsKey(config.key_prefix), { [`${b.kind}:${b.entry}`]: JSON.stringify(entry) });
    await home.redis.expire(listsKey(config.key_prefix), 30 * 86_400);
    return c.json({ ok: true, ...entry, note: "isolates pick lists up within 5 seconds" });
  });

  admin.get("/lists", async (c) => {
    const config = c.get("config");
    const home = offPathStore(c.env, config);
    const entries = home ? parseEntries(await home.redis.hgetall(listsKey(config.key_prefix))) : [];
    return c.json({ entries: entries.filter((e) => e.until > Date.now()).map(({ kind, entry, until, routes, note }) => ({ kind, entry, expires_at: new Date(until).toISOString(), routes, note })) });
  });

  admin.delete("/lists", async (c) => {
    const config = c.get("config");
    const body = z.object({ kind: z.enum(["deny", "allow"]), entry: z.string() }).strict().safeParse(await c.req.json().catch(() => undefined));
    if (!body.success) return bad(body.error);
    const home = offPathStore(c.env, config);
    await home?.redis.hdel(listsKey(config.key_prefix), `${body.data.kind}:${body.data.entry}`);
    return c.json({ ok: true });
  });

  admin.get("/metrics", async (c) => {
    const config = c.get("config");
    await maybeFlush(config, c.env, (p) => c.executionCtx.waitUntil(p), true);
    const home = offPathStore(c.env, config);
    if (!home) return problem({ status: 503, title: "Metrics unavailable", detail: "no Redis for the home region" });
    const k = metricKeys(config.key_prefix, minuteOf(Date.now()));
    const [total, minute] = await Promise.all([home.redis.hgetall(k.total), home.redis.hgetall(k.minute)]);
    return c.text(prometheus(asHash(total), asHash(minute)), 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
  });
}

/** The field an override is kept under: `{limit}:*` for everybody, `{limit}:{bucket hash}` for one client. */
async function overrideField(config: Config, limit: Config["routes"][number]["limits"][number], name: string, identity: Record<string, string> | undefined, region: string | undefined): Promise<string> {
  if (!identity) return `${name}:*`;
  const id = identify(limit.key, factsFromParams(new URLSearchParams(identity)), "ip");
  if (id.kind !== "id") return "!the identity is incomplete";
  const r = region ?? config.home_region;
  return `${name}:${await bucketHash(limit, id.id, r)}`;
}
