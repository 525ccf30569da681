/*
 * Requests sent to a route's `divert_url`, by why (docs/shedding.md, Failover): a refusal by its
 * limits, its open breaker, or the main origin failing them. Kept in the same per-minute and
 * all-time hashes as the decisions, under fields of two parts (`divert:{route}|{reason}`), so the
 * readers of `route|limit|decision` pass over them.
 */
import type { FieldCounter } from "./idempotency.js";

const DIVERT_FIELD = "divert:";

/** Counts one request of `route` sent to its divert origin for `reason` (one of `divert_on`'s). */
export function countDivert(metrics: FieldCounter, route: string, reason: string): void {
  metrics.countField(`${DIVERT_FIELD}${route}|${reason}`);
}

/** `sluice_diverts_total{route,reason}` from the all-time counts. */
export function divertLines(total: Record<string, string | number>, esc: (v: string | undefined) => string): string[] {
  const lines = [
    "# HELP sluice_diverts_total Requests sent to the route's divert_url, by route and reason (limit, breaker, 5xx, timeout, mode).",
    "# TYPE sluice_diverts_total counter",
  ];
  for (const [field, n] of Object.entries(total).sort()) {
    if (!field.startsWith(DIVERT_FIELD)) continue;
    const [route, reason] = field.slice(DIVERT_FIELD.length).split("|");
    lines.push(`sluice_diverts_total{route="${esc(route)}",reason="${esc(reason)}"} ${Number(n)}`);
  }
  return lines;
}
