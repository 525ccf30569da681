import listsLua from "../../../lua/access-lists.lua";
import { listsKey, versionKey } from "../../store/layout.js";
import type { Batch, Store } from "../../store/redis.js";
import { bumpVersions, VERSION_TTL_MS, versionOf } from "../../store/versions.js";
import { everyStore, type Stores } from "../../region/index.js";
import type { Config } from "../../config/index.js";
import { decodeModes, type RouteMode } from "./mode/store.js";
import { scriptReply } from "../../store/replies.js";

/**
 * The deny and allow lists in the home region's Redis: one hash (`{prefix}:lists`), a field per
 * kind and entry (`{kind}:{entry}`) holding the entry as JSON (and a field per route whose
 * degrade switch is set, `mode:{route}`, src/features/access/mode/), the hash living `LISTS_TTL_S` past
 * its last change (each entry has its own expiry inside). Every read and write of it is here: the
 * isolates' refresh (lists.ts), the admin API (src/features/access/admin.ts) and automatic bans (bans.ts).
 * Each is one call of lua/access-lists.lua, which first drops the fields that have run out (so no reader
 * is handed a dead entry, and a thousand one-second bans leave nothing behind), bounds the live
 * automatic bans at `MAX_BANS`, and bumps the Redis's change counter (`{prefix}:version`) after
 * every write, which is how isolates learn that their copy is behind.
 */

/** An entry of the deny or allow list: an IP, a CIDR range, or `<key part>=<value>` (e.g. `header:x-api-key=k1`). */
export interface ListEntry {
  kind: "deny" | "allow";
  entry: string;
  /** ms since epoch */
  until: number;
  /** allow entries: the routes whose limits are skipped (all when absent) */
  routes?: string[];
  note?: string;
  /** `ban`: written by a limit's `ban` (bans.ts), which the cap may drop; absent: the operator's. */
  source?: "ban";
}

/**
 * The most automatic bans in force at once, for the whole deployment. Every isolate copies the
 * lists whole and reads them again on every change, so invented clients banned one after another
 * must not grow them without end: past the cap, a new ban drops the ban that expires soonest (its
 * client is still limited by the limit that banned it, and its next ban escalates from its level).
 * Operators' entries and the routes' switches are never dropped nor counted.
 */
export const MAX_BANS = 1_000;

/** How long the lists hash outlives its last change (each entry has its own expiry inside). */
export const LISTS_TTL_S = 30 * 86_400;

/** An entry's field in the lists hash: one per kind and entry, so writing it again replaces it. */
export function listField(entry: Pick<ListEntry, "kind" | "entry">): string {
  return `${entry.kind}:${entry.entry}`;
}

/** Every entry of the lists hash in force (access-lists.lua drops the rest); values that do not parse are passed over. */
export async function readEntries(store: Store, prefix: string): Promise<ListEntry[]> {
  return (await readEntriesAt(store, prefix)).entries;
}

/**
 * Every entry in force, the routes' degrade switches (src/features/access/mode/), and the Redis's change
 * counter, read in the same atomic call (access-lists.lua `read`, which drops what has run out first):
 * writers bump it after writing, so every write made before the counter reached that value is in
 * what was read.
 */
export async function readEntriesAt(
  store: Store,
  prefix: string,
): Promise<{ entries: ListEntry[]; modes: RouteMode[]; version: number }> {
  const [version, ...values] = await lists(store, prefix, ["read", Date.now()]);
  return { entries: decodeEntries(values), modes: decodeModes(values), version: versionOf(version) };
}

/**
 * Writes one field of the lists hash (JSON), renews the hash's lifetime and bumps the change
 * counter, in one call that first drops what has run out. An automatic ban (`source: "ban"`)
 * past `MAX_BANS` drops the bans that expire soonest: their fields are given back.
 */
export async function writeField(store: Store, prefix: string, field: string, value: unknown): Promise<string[]> {
  const [, ...dropped] = await lists(store, prefix, [
    "write",
    Date.now(),
    field,
    JSON.stringify(value),
    MAX_BANS,
    VERSION_TTL_MS,
    LISTS_TTL_S,
  ]);
  return dropped.map(String);
}

/** Removes one field of the lists hash and bumps the change counter, in one call: whether it was there (and in force). */
export async function removeField(store: Store, prefix: string, field: string): Promise<boolean> {
  const [removed] = await lists(store, prefix, ["remove", Date.now(), field, "", 0, VERSION_TTL_MS]);
  return Number(removed) === 1;
}

/** One call of lua/access-lists.lua (see its contract); its reply as a list. */
async function lists(store: Store, prefix: string, args: Array<string | number>): Promise<unknown[]> {
  return scriptReply(
    await store.run(store.script(listsLua), [listsKey(prefix), versionKey(prefix)], args),
    "access-lists.lua",
  );
}

/**
 * Writes an entry (replacing the one of the same kind and entry), as `writeField` does: the
 * fields of the automatic bans the cap dropped to make room for it.
 */
export async function writeEntry(store: Store, prefix: string, entry: ListEntry): Promise<string[]> {
  return writeField(store, prefix, listField(entry), entry);
}

/** Removes an entry and bumps the change counter, in one request: whether it was there. */
export async function removeEntry(
  store: Store,
  prefix: string,
  entry: Pick<ListEntry, "kind" | "entry">,
): Promise<boolean> {
  return removeField(store, prefix, listField(entry));
}

/** HGET of one entry, for a batch; its reply is read with `decodeEntries([reply])`. */
export function readEntryIn(batch: Batch, prefix: string, entry: Pick<ListEntry, "kind" | "entry">): void {
  batch.hget(listsKey(prefix), listField(entry));
}

/**
 * The entries of the hash's values: JSON text, or (from a client that deserialises replies) the
 * object already; anything else (none, a value that does not parse or names no entry) is passed over.
 */
export function decodeEntries(values: readonly unknown[]): ListEntry[] {
  return values.flatMap((v): ListEntry[] => {
    try {
      const e: unknown = typeof v === "string" ? JSON.parse(v) : v;
      return typeof e === "object" && e !== null && typeof (e as ListEntry).entry === "string" ? [e as ListEntry] : [];
    } catch {
      return [];
    }
  });
}

/**
 * Bumps the change counter of every other Redis of the deployment after a write of the lists (the
 * home one's is bumped with the write): an isolate that decides only in another region learns of
 * the change from its own Redis.
 */
export async function announce(
  config: Pick<Config, "regions" | "home_region" | "key_prefix">,
  stores: Stores,
  home: Store,
): Promise<void> {
  const others = everyStore(config, stores).filter((s) => s.id !== home.id);
  await bumpVersions(others, config.key_prefix);
}
