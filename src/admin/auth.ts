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
