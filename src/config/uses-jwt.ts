import type { RouteSettings } from "./schema.js";

/** Whether any limit of the route keys (or takes its tier) on a JWT claim, or its session lock, idempotency principal or priority does. */
export function usesJwt(
  route: Pick<RouteSettings, "limits" | "session" | "idempotency"> & Partial<Pick<RouteSettings, "priority">>,
): boolean {
  const session = route.session ? [route.session.key, ...route.session.principal] : [];
  const principal = route.idempotency?.principal ?? [];
  const priority = typeof route.priority === "string" ? route.priority : "";
  return [...route.limits.flatMap((l) => [...l.key, l.tier ?? ""]), ...session, ...principal, priority].some((p) =>
    p.startsWith("jwt:"),
  );
}
