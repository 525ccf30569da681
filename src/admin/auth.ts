import { timingSafeEqual } from "hono/utils/buffer";
import { hex, sha256Hex } from "../util/digest.js";

const encoder = new TextEncoder();

/**
 * Compares a presented bearer token with the configured one in constant time. Both are hashed
 * first and the digests compared, so the comparison always runs over two strings of the same
 * length: neither the token's length nor the first differing byte shows in the timing.
 */
export async function tokenMatches(presented: string | null, expected: string): Promise<boolean> {
  const m = /^Bearer\s+(.+)$/i.exec(presented?.trim() ?? "");
  // compared even without a "Bearer" match, so a malformed header costs the same time as a wrong token
  const [a, b] = await Promise.all([sha256Hex(m?.[1] ?? ""), sha256Hex(expected)]);
  const equal = await timingSafeEqual(a, b);
  return m !== null && equal;
}

/** A session's absolute life: no use of it stretches it past this. */
export const SESSION_MS = 12 * 3600_000;

/** A dashboard session as its cookie names it (the signature checked). */
export interface Session {
  /** 128 random bits, hex: what the server-side record is kept under (hashed). */
  id: string;
  /** Epoch ms: the end of its absolute life. */
  expiry: number;
}

/**
 * A dashboard session: `{expiry}.{id}.{HMAC-SHA256 of both, keyed by the admin token}`. The
 * cookie never carries the token itself, a session cannot be stretched, and changing the token
 * ends every session. The id names the session's server-side record (./sessions.ts), which
 * sign-out deletes and idleness lets expire.
 */
export async function issueSession(
  token: string,
  now = Date.now(),
): Promise<{ value: string; maxAgeS: number; session: Session }> {
  const session = { id: hex(crypto.getRandomValues(new Uint8Array(16))), expiry: now + SESSION_MS };
  return {
    value: `${session.expiry}.${session.id}.${await sign(token, session)}`,
    maxAgeS: SESSION_MS / 1000,
    session,
  };
}

/** The session a cookie's value names, if `issueSession` gave it for this token and its absolute life has not ended. */
export async function sessionOf(
  value: string | undefined,
  token: string,
  now = Date.now(),
): Promise<Session | undefined> {
  const m = /^(\d{13})\.([0-9a-f]{32})\.([0-9a-f]{64})$/.exec(value ?? "");
  if (!m || Number(m[1]) <= now) return undefined;
  const session = { id: m[2] as string, expiry: Number(m[1]) };
  return (await timingSafeEqual(await sign(token, session), m[3] as string)) ? session : undefined;
}

async function sign(token: string, session: Session): Promise<string> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(token), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const signed = encoder.encode(`sluice-admin-session:${session.expiry}:${session.id}`);
  return hex(new Uint8Array(await crypto.subtle.sign("HMAC", key, signed)));
}
