import { timingSafeEqual } from "hono/utils/buffer";
import { sha256 } from "hono/utils/crypto";

const encoder = new TextEncoder();

/**
 * Compares a presented bearer token with the configured one in constant time. Both are hashed
 * first and the digests compared, so the comparison always runs over two strings of the same
 * length: neither the token's length nor the first differing byte shows in the timing.
 */
export async function tokenMatches(presented: string | null, expected: string): Promise<boolean> {
  const m = /^Bearer\s+(.+)$/i.exec(presented?.trim() ?? "");
  // compared even without a "Bearer" match, so a malformed header costs the same time as a wrong token
  const [a, b] = await Promise.all([sha256(m?.[1] ?? ""), sha256(expected)]);
  if (a === null || b === null) return false;
  const equal = await timingSafeEqual(a, b);
  return m !== null && equal;
}

const SESSION_MS = 12 * 3600_000;

/**
 * A dashboard session: `{expiry}.{HMAC-SHA256 of the expiry, keyed by the admin token}`. The
 * cookie never carries the token itself, a session cannot be stretched, and changing the token
 * ends every session.
 */
export async function issueSession(token: string, now = Date.now()): Promise<{ value: string; maxAgeS: number }> {
  const expiry = now + SESSION_MS;
  return { value: `${expiry}.${await sign(token, expiry)}`, maxAgeS: SESSION_MS / 1000 };
}

/** Whether a session cookie's value is one `issueSession` gave for this token and has not expired. */
export async function sessionValid(value: string | undefined, token: string, now = Date.now()): Promise<boolean> {
  const m = /^(\d{13})\.([0-9a-f]{64})$/.exec(value ?? "");
  if (!m || Number(m[1]) <= now) return false;
  return timingSafeEqual(await sign(token, Number(m[1])), m[2] as string);
}

async function sign(token: string, expiry: number): Promise<string> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(token), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(`sluice-admin-session:${expiry}`)));
  return [...mac].map((x) => x.toString(16).padStart(2, "0")).join("");
}
