/*
 * Session refusals (docs/idempotency-and-sessions.md, Sessions): a call refused `409` because
 * another call of its session was in flight. Counted, not ledgered: a client may cause as many as
 * its limits let it, and the ledger is for the outcomes that decide a side effect. Kept in the same
 * per-minute and all-time hashes as the decisions, under fields of two parts
 * (`session:{route}|refused`), so the readers of `route|limit|decision` pass over them.
 */
import type { FieldCounter } from "./idempotency.js";

const SESSION_FIELD = "session:";

/** Counts one call of `route` refused because its session was busy. */
export function countSessionRefusal(metrics: FieldCounter, route: string): void {
  metrics.countField(`${SESSION_FIELD}${route}|refused`);
}

/** `sluice_session_refusals_total{route}` from the all-time counts. */
export function sessionLines(total: Record<string, string | number>, esc: (v: string | undefined) => string): string[] {
  const lines = [
    "# HELP sluice_session_refusals_total Calls refused 409 because another call of their session was in flight, by route.",
    "# TYPE sluice_session_refusals_total counter",
  ];
  for (const [field, n] of Object.entries(total).sort()) {
    if (!field.startsWith(SESSION_FIELD)) continue;
    const [route, what] = field.slice(SESSION_FIELD.length).split("|");
    if (what === "refused") lines.push(`sluice_session_refusals_total{route="${esc(route)}"} ${Number(n)}`);
  }
  return lines;
}
