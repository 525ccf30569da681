/**
 * An operator's degrade switch for a route, kept as one more field of the access lists' hash in
 * the home Redis (`{prefix}:lists`, field `mode:{route}`): written and removed with the lists'
 * writer (src/features/access/lists-store.ts), so the change counter moves with it and every
 * isolate reads it with the lists it already re-reads, at no extra command on a decision.
 */

/** What an operator may force a route into: answer every request as that shedding would, or `open` (skip its limits). */
export const FORCED_MODES = ["fallback", "reject", "divert", "open"] as const;
export type ForcedMode = (typeof FORCED_MODES)[number];

/** A route's switch as stored: JSON in the lists hash. Carries no `entry`, so the lists' decoder passes it over. */
export interface RouteMode {
  kind: "mode";
  route: string;
  mode: ForcedMode;
  /** ms since epoch (the setting isolate's clock, as list entries' `until`) */
  until: number;
  /** Who set it, as the ledger names the operator. */
  by: string;
  note?: string;
}

/** The switch's field in the lists hash: one per route, so setting it again replaces it. */
export function modeField(route: string): string {
  return `mode:${route}`;
}

/** The switches among the lists hash's values (JSON text, or the object a deserialising client gives); anything else is passed over. */
export function decodeModes(values: readonly unknown[]): RouteMode[] {
  return values.flatMap((v): RouteMode[] => {
    try {
      const m: unknown = typeof v === "string" ? JSON.parse(v) : v;
      return isRouteMode(m) ? [m] : [];
    } catch {
      return [];
    }
  });
}

function isRouteMode(m: unknown): m is RouteMode {
  if (typeof m !== "object" || m === null) return false;
  const r = m as Partial<RouteMode>;
  return (
    r.kind === "mode" &&
    typeof r.route === "string" &&
    typeof r.until === "number" &&
    (FORCED_MODES as readonly unknown[]).includes(r.mode)
  );
}

/** The switch in force for `route` at `now`, if any. */
export function modeInForce(modes: readonly RouteMode[], route: string, now: number): RouteMode | undefined {
  return modes.find((m) => m.route === route && m.until > now);
}
