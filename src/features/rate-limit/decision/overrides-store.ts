import type { Store } from "../../../store/redis.js";
import { keyPrefixOf } from "../../../store/layout.js";
import { bumpVersionIn } from "../../../store/versions.js";

/**
 * A route's overrides hash (`{prefix}:{route}:overrides`, in every region's Redis): field
 * `{limit}:{bucket hash}` (one client) or `{limit}:*` (everybody) → `rate:burst:period_ms:until_ms`,
 * the hash living as long as its longest override. Every command on it is here: the isolates'
 * copies (overrides.ts) and the admin API (src/features/rate-limit/admin-overrides.ts); decide.lua reads it and
 * adaptive.lua writes its own field, each in its script. Every write bumps the Redis's change
 * counter (`{prefix}:version`) after it, in the same request: how isolates learn their copy is behind.
 */

/** One override's figures as a field's value holds them. */
export interface OverrideValue {
  rate: number;
  burst: number;
  periodMs: number;
  /** ms since epoch */
  until: number;
}

/** The value of a field: `rate:burst:period_ms:until_ms`, as decide.lua reads it. */
export function encodeOverride(o: OverrideValue): string {
  return `${o.rate}:${o.burst}:${o.periodMs}:${o.until}`;
}

/** A field's value read back (missing figures read as 0, so a malformed one has run out). */
export function decodeOverride(value: string): OverrideValue {
  const [rate = 0, burst = 0, periodMs = 0, until = 0] = value.split(":").map(Number);
  return { rate, burst, periodMs, until };
}

/** The whole hash: field → value (expired ones included: expiry is the reader's). */
export function readOverrides(store: Store, key: string): Promise<Record<string, string>> {
  return store.hash.getAll(key);
}

/** How many fields the hash holds. */
export function countOverrides(store: Store, key: string): Promise<number> {
  return store.hash.len(key);
}

/** Sets one field; the hash lives as long as its longest override (its TTL is raised, never cut). */
export async function writeOverride(
  store: Store,
  key: string,
  field: string,
  value: string,
  ttlMs: number,
): Promise<void> {
  const [, left] = await store.pipeline((b) => {
    b.hset(key, { [field]: value }).pttl(key);
    bumpVersionIn(b, keyPrefixOf(key), ttlMs);
  });
  if (Number(left) < ttlMs) await store.keys.pexpire(key, ttlMs);
}

/** Removes one field. */
export async function removeOverride(store: Store, key: string, field: string): Promise<void> {
  await store.pipeline((b) => {
    b.hdel(key, field);
    bumpVersionIn(b, keyPrefixOf(key));
  });
}
