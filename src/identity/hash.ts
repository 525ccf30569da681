import { sha256Hex } from "../util/digest.js";

declare const keyHashBrand: unique symbol;

/**
 * Client input in the only form it may take in a Redis key name. A brand, so that the key
 * functions of `store/layout.ts` refuse a raw client value at compile time.
 */
export type KeyHash = string & { readonly [keyHashBrand]: true };

/**
 * SHA-256 of client-supplied text, as 32 hex characters (128 bits): the only form in which
 * client input may reach a Redis key name, so keys stay short and nothing can be injected.
 */
export async function hashIdentifier(text: string): Promise<KeyHash> {
  return (await sha256Hex(text)).slice(0, 32) as KeyHash;
}

const KEY_HASH = /^[0-9a-f]{32}$/;

/**
 * A hash that arrives as plain text (a queue message, an operator's request), checked to be one
 * before it may name a key: whatever is not 32 hex digits is refused, never used.
 */
export function asKeyHash(text: string): KeyHash {
  if (!KEY_HASH.test(text)) throw new TypeError("not a key hash (32 hex digits)");
  return text as KeyHash;
}
