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

/**
 * The hash of one client's identity as `identify()` spells it (a limit's key parts, a principal):
 * with a `region`, its bucket's there (`{identity}@{region}`: regions sharing one database keep
 * separate buckets); without, the client's wherever it calls (a global bucket, its queued jobs,
 * its replay bucket).
 *
 * @example await identityHash('[["ip","203.0.113.9"]]', "us") // the IP's buckets in region "us"
 */
export function identityHash(identity: string, region?: string): Promise<KeyHash> {
  return hashIdentifier(region === undefined ? identity : `${identity}@${region}`);
}

/**
 * The hash of a name a principal gives (an `Idempotency-Key`, a session id) within that
 * principal's own names: the same name sent by another principal is another hash, so nobody can
 * meet, hold or replay another caller's key or session by sending its name.
 *
 * @example await ownedHash('[["jwt:sub","alice"]]', "order-42") // alice's record of "order-42"
 */
export function ownedHash(principal: string, name: string): Promise<KeyHash> {
  return hashIdentifier(JSON.stringify([principal, name]));
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
