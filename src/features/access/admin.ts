import { Hono, type Context } from "hono";
import { z } from "zod";
import { validEntry } from "../../identity/entry.js";
import { announce, readEntries, removeEntry as removeListEntry, writeEntry, type ListEntry } from "./lists-store.js";
import type { Config } from "../../config/index.js";
import { parseDuration } from "../../config/duration.js";
import type { Stores } from "../../region/index.js";
import { adminHandlers, required, type AdminEnv } from "../../operator/context.js";
import { ledgerAdminAction } from "../../operator/ledger.js";
import { badRequest, duration, jsonBody } from "../../operator/validate.js";
import { PROBLEMS } from "../../problem-types.js";
import type { Store } from "../../store/redis.js";
import type { ListCache } from "./lists.js";

/**
 * This isolate's copy of the lists (the gateway's): a write through the admin API is read back
 * into it at once, so the writing isolate applies an entry from its next request on; the others
 * apply it once a decision of theirs has reported the change counter the write moved.
 */
export type ListsCopy = Pick<ListCache, "reread">;

/** Reads the lists back into this isolate's copy after a write of `home`. */
export async function rereadHere(lists: ListsCopy, prefix: string, home: Store): Promise<void> {
  await lists.reread({ prefix, store: home });
}

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

const addEntry = (lists: ListsCopy) =>
  adminHandlers.createHandlers(jsonBody(listBody), async (c) => {
    const b = c.req.valid("json");
    checkRoutes(c, b.routes);
    const home = required(c.get("stores").offPath(), PROBLEMS.storeUnavailable, "no Redis for the home region");
    const until = Date.now() + (parseDuration(b.ttl) as number);
    const entry: ListEntry = {
      kind: b.kind,
      entry: b.entry,
      until,
      ...(b.routes ? { routes: b.routes } : {}),
      ...(b.note ? { note: b.note } : {}),
    };
    await writeEntry(home, c.get("config").key_prefix, entry);
    await rereadHere(lists, c.get("config").key_prefix, home);
    await announce(c.get("config"), c.get("stores"), home);
    await ledgerAdminAction(c, b.kind === "deny" ? "admin_ban" : "admin_allow", { ...entry, ttl: b.ttl });
    return c.json({ ok: true, ...entry, note: APPLIED });
  });

/**
 * An entry for routes is for routes the configuration has, whose middleware apply the lists; an
 * entry for every route needs one middleware that does. Otherwise it would answer ok and change
 * nothing (a 400 naming the field instead).
 */
function checkRoutes(c: Context<AdminEnv>, routes: string[] | undefined): void {
  const served = c.get("served");
  if (!routes) {
    const nowhere = served?.gapAnywhere("lists");
    if (nowhere) throw badRequest(nowhere);
    return;
  }
  const names = new Set(c.get("config").routes.map((r) => r.name));
  routes.forEach((route, i) => {
    if (!names.has(route)) throw badRequest(`routes[${i}]: no route named "${route}"`);
    const gap = served?.gap(route, "lists");
    if (gap) throw badRequest(`routes[${i}]: ${gap.detail}`);
  });
}

/** What a write's answer says of when it applies. */
export const APPLIED =
  "in force on this isolate from its next request; on each other isolate once a decision of its has reported the change and its read of the lists has landed";

const listEntries = adminHandlers.createHandlers(async (c) =>
  c.json({ entries: await entriesInForce(c.get("config"), c.get("stores")) }),
);

/** A deny or allow entry in force, as `GET /__sluice/lists` shows it. */
export interface ListRow {
  kind: "deny" | "allow";
  entry: string;
  expires_at: string;
  routes?: string[];
  note?: string;
}

/** The deny and allow entries that have not run out, as the API and the dashboard show them. */
export async function entriesInForce(config: Config, stores: Stores): Promise<ListRow[]> {
  const home = stores.offPath();
  const entries = home ? await readEntries(home, config.key_prefix) : [];
  const live = entries.filter((e) => e.until > Date.now());
  return live.map(({ kind, entry, until, routes, note }) => ({
    kind,
    entry,
    expires_at: new Date(until).toISOString(),
    routes,
    note,
  }));
}

const removeEntry = (lists: ListsCopy) =>
  adminHandlers.createHandlers(jsonBody(removalBody), async (c) => {
    const b = c.req.valid("json");
    const home = c.get("stores").offPath();
    // nothing to remove where no Redis is configured: the answer is the same
    const removed = home ? await removeListEntry(home, c.get("config").key_prefix, b) : false;
    if (home) await rereadHere(lists, c.get("config").key_prefix, home);
    if (home) await announce(c.get("config"), c.get("stores"), home);
    await ledgerAdminAction(c, b.kind === "deny" ? "admin_unban" : "admin_unallow", { ...b, removed });
    return c.json({ ok: true });
  });

/**
 * `/__sluice/lists`, the deny and allow lists in the home region's Redis: `PUT` adds an entry (an
 * IP, a CIDR range or `<key part>=<value>`) until its `ttl`, `GET` lists the entries in force,
 * `DELETE` removes one. Each write is read back into `lists`, this isolate's copy, before the
 * answer, and bumps every Redis's change counter: another isolate reads the lists again once a
 * decision of its has reported the change.
 */
export function listsApp(lists: ListsCopy): Hono<AdminEnv> {
  return new Hono<AdminEnv>()
    .put("/", ...addEntry(lists))
    .get("/", ...listEntries)
    .delete("/", ...removeEntry(lists));
}
