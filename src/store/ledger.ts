import { ledgerKey } from "./layout.js";
import type { Store } from "./redis.js";

/**
 * The ledger (`{prefix}:ledger`), a stream capped at about `ledger_length` entries: the scripts
 * append the idempotency and session outcomes, the admin API the operator's changes
 * (`appendLedger`), and the admin API reads it back (`readLedgerPage`).
 */

/** Appends one entry (its id given by Redis), keeping the stream at about `maxLen` entries. */
export async function appendLedger(
  store: Store,
  prefix: string,
  fields: Record<string, string>,
  maxLen: number,
): Promise<void> {
  await store.stream.add(ledgerKey(prefix), fields, maxLen);
}

/** One ledger entry: its stream id and its fields. */
export type LedgerEntry = Record<string, string> & { id: string };

/**
 * Up to `count` ledger entries, newest first, from `end` (`+`, or `(id` for those before an id)
 * down to `start` (`-`, or an id such as `{ms}-0`): one XREVRANGE.
 */
export async function readLedgerPage(
  store: Store,
  prefix: string,
  end: string,
  start: string,
  count: number,
): Promise<LedgerEntry[]> {
  return ledgerEntries(await store.stream.revRange(ledgerKey(prefix), end, start, count));
}

/** XREVRANGE as the client gives it without deserialisation: [[id, [field, value, ...]], ...]. */
function ledgerEntries(reply: unknown): LedgerEntry[] {
  if (!Array.isArray(reply)) {
    // a client that deserialises gives { id: { field: value } }
    const byId = (reply ?? {}) as Record<string, Record<string, string>>;
    return Object.entries(byId).map(([id, fields]) => ({ ...fields, id }));
  }
  return reply.map((entry) => {
    const [id, fields] = entry as [string, string[]];
    const out: LedgerEntry = { id: String(id) };
    for (let i = 0; i + 1 < fields.length; i += 2) out[String(fields[i])] = String(fields[i + 1]);
    return out;
  });
}
