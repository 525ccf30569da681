import auditLua from "../../lua/audit.lua";
import { auditKey, ledgerKey } from "./layout.js";
import type { Store } from "./redis.js";

/**
 * The two trails, each a stream: the ledger (`{prefix}:ledger`, capped at about `ledger_length`
 * entries), to which the scripts append the idempotency and session outcomes, and the audit trail
 * (`{prefix}:audit`, capped at about `AUDIT_LENGTH`), to which the admin API appends the operators'
 * changes (`appendAudit`): apart, so that no amount of client traffic can trim an operator's change
 * away. The admin API reads both back (`readTrailPage`).
 */

/** Which trail: the idempotency and session outcomes, or the operators' changes. */
export type Trail = "ledger" | "audit";

/** The operators' changes kept: about this many, whatever the clients do (they write none). */
export const AUDIT_LENGTH = 10_000;
/** The audit trail lives this long after its last change (a year), so every key has a TTL. */
export const AUDIT_TTL_S = 366 * 86_400;

/**
 * Appends an operator's change to the audit trail (its id given by Redis) and renews the trail's
 * lifetime, in one script call (lua/audit.lua): the trail never exists without its TTL.
 */
export async function appendAudit(store: Store, prefix: string, fields: Record<string, string>): Promise<void> {
  const entry = Object.entries(fields).flat();
  await store.run(store.script(auditLua), [auditKey(prefix)], [AUDIT_LENGTH, AUDIT_TTL_S, ...entry]);
}

/** One ledger entry: its stream id and its fields. */
export type LedgerEntry = Record<string, string> & { id: string };

/**
 * Up to `count` entries of a trail, newest first, from `end` (`+`, or `(id` for those before an id)
 * down to `start` (`-`, or an id such as `{ms}-0`): one XREVRANGE.
 */
export async function readTrailPage(
  store: Store,
  prefix: string,
  trail: Trail,
  end: string,
  start: string,
  count: number,
): Promise<LedgerEntry[]> {
  const key = trail === "audit" ? auditKey(prefix) : ledgerKey(prefix);
  return ledgerEntries(await store.stream.revRange(key, end, start, count));
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
