/**
 * Digests in hex, written once: every SHA-256 sluice takes (client values for key names, request
 * fingerprints, derived keys, the admin token's comparison) and the SHA-1 Redis names scripts by.
 * Text is hashed as its UTF-8 bytes (TextEncoder: a lone surrogate as U+FFFD).
 */
const encoder = new TextEncoder();

/**
 * Bytes as lowercase hex, two digits a byte.
 *
 * @example hex(new Uint8Array([0, 171])) // "00ab"
 */
export function hex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

/**
 * The SHA-256 of text (as UTF-8) or bytes: 64 lowercase hex digits.
 *
 * @example await sha256Hex("") // "e3b0c442…b855"
 */
export function sha256Hex(data: string | Uint8Array): Promise<string> {
  return digestHex("SHA-256", data);
}

/** The SHA-1 of text (as UTF-8): what EVALSHA names a script by, never a hash of client input. */
export function sha1Hex(text: string): Promise<string> {
  return digestHex("SHA-1", text);
}

async function digestHex(algorithm: "SHA-256" | "SHA-1", data: string | Uint8Array): Promise<string> {
  const bytes = typeof data === "string" ? encoder.encode(data) : data;
  return hex(new Uint8Array(await crypto.subtle.digest(algorithm, bytes)));
}
