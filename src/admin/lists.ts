import { Hono } from "hono";
import { z } from "zod";
import { LISTS_TTL_S, parseEntries, validEntry, type ListEntry } from "../access/lists.js";
import { parseDuration } from "../config/duration.js";
import { listsKey } from "../store/layout.js";
import { adminHandlers, required, type AdminEnv } from "./context.js";
import { duration, jsonBody } from "./validate.js";

const listBody = z
  .object({
    kind: z.enum(["deny", "allow"]),
    entry: z.string().min(1).max(300).refine(validEntry, "must be an IP, a CIDR range, or <key part>=<value>"),
    ttl: duration,
    routes: z.array(z.string()).optional(),
    note: z.string().max(200).optional(),
  })
  .strict();

const removalBody = z.object({ kind: z.enum(["deny", "allow"]), entry: z.string() }).strict();

const addEntry = adminHandlers.createHandlers(jsonBody(listBody), async (c) => {
  const key = listsKey(c.get("config").key_prefix);
  const b = c.req.valid("json");
  const home = required(c.get("stores").offPath(), "Store unavailable", "no Redis for the home region");
  const until = Date.now() + (parseDuration(b.ttl) as number);
  const entry: ListEntry = {
    kind: b.kind,
    entry: b.entry,
    until,
    ...(b.routes ? { routes: b.routes } : {}),
    ...(b.note ? { note: b.note } : {}),
  };
  await home.redis.hset(key, { [`${b.kind}:${b.entry}`]: JSON.stringify(entry) });
  await home.redis.expire(key, LISTS_TTL_S);
  return c.json({ ok: true, ...entry, note: "isolates pick lists up within 5 seconds" });
});

const listEntries = adminHandlers.createHandlers(async (c) => {
  const home = c.get("stores").offPath();
  const entries = home ? parseEntries(await home.redis.hgetall(listsKey(c.get("config").key_prefix))) : [];
  const live = entries.filter((e) => e.until > Date.now());
  const shown = live.map(({ kind, entry, until, routes, note }) => ({
    kind,
    entry,
    expires_at: new Date(until).toISOString(),
    routes,
    note,
  }));
  return c.json({ entries: shown });
});

const removeEntry = adminHandlers.createHandlers(jsonBody(removalBody), async (c) => {
  const b = c.req.valid("json");
  const home = c.get("stores").offPath();
  // nothing to remove where no Redis is configured: the answer is the same
  await home?.redis.hdel(listsKey(c.get("config").key_prefix), `${b.kind}:${b.entry}`);
  return c.json({ ok: true });
});

/**
 * `/__sluice/lists`, the deny and allow lists in the home region's Redis: `PUT` adds an entry (an
 * IP, a CIDR range or `<key part>=<value>`) until its `ttl`, `GET` lists the entries in force,
 * `DELETE` removes one. Isolates pick changes up within 5 seconds.
 */
export function listsApp(): Hono<AdminEnv> {
  return new Hono<AdminEnv>()
    .put("/", ...addEntry)
    .get("/", ...listEntries)
    .delete("/", ...removeEntry);
}
