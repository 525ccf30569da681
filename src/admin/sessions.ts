import adminSessionLua from "../../lua/admin-session.lua";
import { hashIdentifier } from "../identity/hash.js";
import { adminSessionKey } from "../store/layout.js";
import type { Store } from "../store/redis.js";
import type { Session } from "./auth.js";

/**
 * The server side of dashboard sessions: one record per signed-in session in the home region's
 * Redis (`{key_prefix}:admin-session:{hash of the id}`), written at sign-in with a TTL of the idle
 * window, renewed by each request of the session, deleted at sign-out. A cookie whose record is
 * gone (signed out, or unused for longer than the idle window) is refused however well it is
 * signed. One script call per request, which both checks and renews.
 */
export interface SessionRecords {
  store: Store;
  keyPrefix: string;
  /** `admin_session_idle`: how long a session may go unused. */
  idleMs: number;
}

/** Writes the record of a session just signed in. */
export async function recordSession(r: SessionRecords, session: Session, now = Date.now()): Promise<void> {
  await call(r, session, "start", ttlMs(r, session, now));
}

/** Whether the session is still signed in (its record exists), renewing its idle window if so. */
export async function touchSession(r: SessionRecords, session: Session, now = Date.now()): Promise<boolean> {
  return Number(await call(r, session, "touch", ttlMs(r, session, now))) === 1;
}

/** Deletes the session's record: its cookie is refused from now on, wherever it is replayed. */
export async function endSession(r: SessionRecords, session: Session): Promise<void> {
  await call(r, session, "end", 0);
}

/** The idle window, never past the session's absolute end. */
function ttlMs(r: SessionRecords, session: Session, now: number): number {
  return Math.max(1, Math.min(r.idleMs, session.expiry - now));
}

async function call(r: SessionRecords, session: Session, op: "start" | "touch" | "end", ttl: number): Promise<unknown> {
  const key = adminSessionKey(r.keyPrefix, await hashIdentifier(session.id));
  return r.store.run(r.store.script(adminSessionLua), [key], [op, ttl]);
}
