import { listsKey } from "../../store/layout.js";
import type { Batch, Store } from "../../store/redis.js";

/**
 * The deny and allow lists in the home region's Redis: one hash (`{prefix}:lists`), a field per
 * kind and entry (`{kind}:{entry}`) holding the entry as JSON, the hash living `LISTS_TTL_S` past
 * its last change (each entry has its own expiry inside). Every read and write of it is here: the
 * isolates' refresh (lists.ts), the admin API (src/features/access/admin.ts) and automatic bans (bans.ts).
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
  return decodeEntries(Object.values(await store.hash.getAll(listsKey(prefix))));
}

/** Writes an entry (replacing the one of the same kind and entry) and renews the hash's lifetime, in one request. */
export async function writeEntry(store: Store, prefix: string, entry: ListEntry): Promise<void> {
  await store.pipeline((b) => writeEntryIn(b, prefix, entry));
}

/** `writeEntry`'s commands, for a batch that sends more. */
export function writeEntryIn(batch: Batch, prefix: string, entry: ListEntry): void {
  const key = listsKey(prefix);
  batch.hset(key, { [listField(entry)]: JSON.stringify(entry) }).expire(key, LISTS_TTL_S);
}

/** Removes an entry: whether it was there. */
export async function removeEntry(
  store: Store,
  prefix: string,
  entry: Pick<ListEntry, "kind" | "entry">,
): Promise<boolean> {
  return (await store.hash.del(listsKey(prefix), listField(entry))) === 1;
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
