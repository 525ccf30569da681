import type { Context } from "hono";
import { getCookie } from "hono/cookie";
import { appendAudit } from "../store/ledger.js";
import { sha256Hex } from "../util/digest.js";
import { ADMIN_SESSION_COOKIE, type AdminEnv } from "./context.js";

/**
 * The operator's changes as the ledger names them: a deny entry added (`admin_ban`) or removed
 * (`admin_unban`), an allow entry added or removed, an override set or removed, a route's degrade
 * switch set or removed (`admin_route_mode`).
 */
export type AdminEvent =
  | "admin_ban"
  | "admin_unban"
  | "admin_allow"
  | "admin_unallow"
  | "admin_override"
  | "admin_override_removed"
  | "admin_route_mode";

/**
 * Appends an operator's change to the audit trail (`{key_prefix}:audit`, a stream of its own: the
 * ledger's outcomes, which clients' traffic writes, can never trim it): `event`, `who` (the admin
 * session or `token`, see `adminActor`), `at` (ms since epoch, as the scripts write it) and
 * `detail` (JSON). Called by the admin handlers once the change is made, so a change through the
 * API is recorded as one through the dashboard is. Without a home Redis there is nothing to change
 * nor to record. `GET /__sluice/ledger` reads both trails, merged.
 */
export async function ledgerAdminAction(
  c: Context<AdminEnv>,
  event: AdminEvent,
  detail: Record<string, unknown>,
): Promise<void> {
  const home = c.get("stores").offPath();
  if (!home) return;
  const fields = { event, who: await adminActor(c), at: String(Date.now()), detail: JSON.stringify(detail) };
  await appendAudit(home, c.get("config").key_prefix, fields);
}

/**
 * Who made an admin request, as the ledger records it: `token` for the bearer token, else
 * `session:` and the first 12 hex digits of the SHA-256 of the session cookie (one per sign-in,
 * the same for all of that session's requests, and no way back to the cookie).
 */
export async function adminActor(c: Context<AdminEnv>): Promise<string> {
  if (c.req.header("authorization")) return "token";
  const session = getCookie(c, ADMIN_SESSION_COOKIE);
  return session ? `session:${(await sha256Hex(session)).slice(0, 12)}` : "unknown";
}
