const encoder = new TextEncoder();

/**
 * SHA-256 of client-supplied text, as 32 hex characters (128 bits): the only form in which
 * client input may reach a Redis key name, so keys stay short and nothing can be injected.
 */
export async function hashIdentifier(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
  let hex = "";
  for (let i = 0; i < 16; i++) hex += (digest[i] as number).toString(16).padStart(2, "0");
  return hex;
}

/** `{key_prefix}:{route}:{limit}:{hash}`: one key per bucket (route and limit names are validated at load). */
export function bucketKey(prefix: string, route: string, limit: string, hash: string): string {
  return `${prefix}:${route}:${limit}:${hash}`;
}
