import { listsKey, versionKey } from "../../store/layout.js";
import type { Batch, Store } from "../../store/redis.js";
import { asHash } from "../../store/replies.js";
import { bumpVersionIn, bumpVersions, versionOf } from "../../store/versions.js";
import { everyStore, type Stores } from "../../region/index.js";
import type { Config } from "../../config/index.js";
import { decodeModes, type RouteMode } from "../mode/store.js";

/**
 * The deny and allow lists in the home region's Redis: one hash (`{prefix}:lists`), a field per
 * kind and entry (`{kind}:{entry}`) holding the entry as JSON (and a field per route whose
 * degrade switch is set, `mode:{route}`, src/features/mode/), the hash living `LISTS_TTL_S` past
 * its last change (each entry has its own expiry inside). Every read and write of it is here: the
 * isolates' refresh (lists.ts), the admin API (src/features/access/admin.ts) and automatic bans (bans.ts).
 * Every write bumps the Redis's change counter (`{prefix}:version`) after it, in the same request,
 * which is how isolates learn that their copy is behind.
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
}

/** How long the lists hash outlives its last change (each entry has its own expiry inside). */
export const LISTS_TTL_S = 30 * 86_400;

/** An entry's field in the lists hash: one per kind and entry, so writing it again replaces it. */
export function listField(entry: Pick<ListEntry, "kind" | "entry">): string {
  return `${entry.kind}:${entry.entry}`;
}

/** Every entry of the lists hash (run out or not); values that do not parse are passed over. */
export async function readEntries(store: Store, prefix: string): Promise<ListEntry[]> {
  return (await readEntriesAt(store, prefix)).entries;
}

/**
 * Every entry, the routes' degrade switches (src/features/mode/), and the Redis's change counter
 * read just before them in the same request (GET, HGETALL): writers bump it after writing, so
 * every write made before the counter reached that value is in what was read.
 */
export async function readEntriesAt(
  store: Store,
  prefix: string,
): Promise<{ entries: ListEntry[]; modes: RouteMode[]; version: number }> {
  const [version, hash] = await store.pipeline((b) => b.get(versionKey(prefix)).hgetall(listsKey(prefix)));
  const values = Object.values(asHash(hash));
  return { entries: decodeEntries(values), modes: decodeModes(values), version: versionOf(version) };
}

/** Writes one field of the lists hash (JSON) and renews the hash's lifetime, the change counter's bump last, in one request. */
export async function writeField(store: Store, prefix: string, field: string, value: unknown): Promise<void> {
  await store.pipeline((b) => writeFieldIn(b, prefix, field, value));
}

function writeFieldIn(batch: Batch, prefix: string, field: string, value: unknown): void {
  const key = listsKey(prefix);
  batch.hset(key, { [field]: JSON.stringify(value) }).expire(key, LISTS_TTL_S);
  bumpVersionIn(batch, prefix);
}

/** Removes one field of the lists hash and bumps the change counter, in one request: whether it was there. */
export async function removeField(store: Store, prefix: string, field: string): Promise<boolean> {
  const [removed] = await store.pipeline((b) => {
    b.hdel(listsKey(prefix), field);
    bumpVersionIn(b, prefix);
  });
  return Number(removed) === 1;
}

/** Writes an entry (replacing the one of the same kind and entry) and renews the hash's lifetime, in one request. */
export async function writeEntry(store: Store, prefix: string, entry: ListEntry): Promise<void> {
  await store.pipeline((b) => writeEntryIn(b, prefix, entry));
}

/** `writeEntry`'s commands (the change counter's bump last), for a batch that sends more. */
export function writeEntryIn(batch: Batch, prefix: string, entry: ListEntry): void {
  writeFieldIn(batch, prefix, listField(entry), entry);
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
