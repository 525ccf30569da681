const encoder = new TextEncoder();

/**
 * Compares a presented bearer token with the configured one in constant time: both are hashed
 * first, so neither the length nor the first differing byte shows in the timing.
 */
export async function tokenMatches(presented: string | null, expected: string): Promise<boolean> {
  const m = /^Bearer\s+(.+)$/i.exec(presented?.trim() ?? "");
  const [a, b] = await Promise.all([digest(m?.[1] ?? ""), digest(expected)]);
  let diff = m ? 0 : 1;
  for (let i = 0; i < a.length; i++) diff |= (a[i] as number) ^ (b[i] as number);
  return diff === 0;
}

async function digest(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
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

export async function sessionValid(value: string | undefined, token: string, now = Date.now()): Promise<boolean> {
  const m = /^(\d{13})\.([0-9a-f]{64})$/.exec(value ?? "");
  if (!m || Number(m[1]) <= now) return false;
  const [a, b] = [encoder.encode(await sign(token, Number(m[1]))), encoder.encode(m[2] as string)];
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= (a[i] as number) ^ (b[i] as number);
  return diff === 0;
}

async function sign(token: string, expiry: number): Promise<string> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(token), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(`sluice-admin-session:${expiry}`)));
  return [...mac].map((x) => x.toString(16).padStart(2, "0")).join("");
}
