import { versionKey } from "./layout.js";
import type { Batch, Store } from "./redis.js";

/**
 * The change counter of what isolates copy from Redis (the lists, the overrides, the bans they
 * write): `{prefix}:version`, one in every Redis. Every writer of those structures bumps it after
 * its write, in the same request; every decision reads it in decide.lua's `MGET` (no command of
 * its own) and returns it, so an isolate refetches a copy only when the counter moved, and
 * background work costs nothing while nothing changes.
 */

/**
 * Each bump keeps the counter at least this long (and at least as long as what the bump announces).
 * So the counter outlives everything it counts: a counter that reads 0 (absent) means no list entry,
 * override or shared state exists in that Redis, which lets a fresh isolate skip reading them.
 */
export const VERSION_TTL_MS = 30 * 86_400_000;

/**
 * The bump, for a batch that sends the write first: after the write, so a copy read at the new
 * version holds it. `lifetimeMs` is how long what was written may live (an override's `ttl`).
 */
export function bumpVersionIn(batch: Batch, prefix: string, lifetimeMs = 0): void {
  const key = versionKey(prefix);
  batch.incr(key).pexpireAtLeast(key, Math.max(VERSION_TTL_MS, lifetimeMs));
}

/** Bumps the counter of each of these Redis (one request each, in parallel): a write they all must learn about. */
export async function bumpVersions(stores: readonly Store[], prefix: string): Promise<void> {
  await Promise.all(stores.map((s) => s.pipeline((b) => bumpVersionIn(b, prefix))));
}

/** The counter as a reply gives it: absent reads as 0. */
export function versionOf(reply: unknown): number {
  const n = Number(reply ?? 0);
  return Number.isFinite(n) ? n : 0;
}

/**
 * The counters this isolate has seen, per Redis (its `Store.id`), and who wants to hear when one
 * moves. The first sight of a Redis's counter is not a change: copies read before it carry the
 * counter they were read at (`of`), and compare it themselves.
 */
export class StoreVersions {
  private readonly seen = new Map<string, { version: number; changedAt: number }>();
  private readonly listeners: Array<(storeId: string) => void> = [];
  /** When a decision last reported a counter (isolate clock); 0: never. */
  lastObservedAt = 0;

  /** The counter last seen for this Redis; `undefined` before any decision reported it. */
  of(storeId: string): number | undefined {
    return this.seen.get(storeId)?.version;
  }

  /** When this Redis's counter last moved, as far as this isolate saw (isolate clock); 0: never. */
  changedAt(storeId: string): number {
    return this.seen.get(storeId)?.changedAt ?? 0;
  }

  /** A decision's reply from this Redis said `version`. */
  observe(storeId: string, version: number, now = Date.now()): void {
    this.lastObservedAt = now;
    const before = this.seen.get(storeId);
    if (before?.version === version) return;
    this.seen.set(storeId, { version, changedAt: before ? now : 0 });
    if (before) for (const listener of this.listeners) listener(storeId);
  }

  /** Calls `listener` with the Redis whose counter moved, each time one does. */
  onChange(listener: (storeId: string) => void): void {
    this.listeners.push(listener);
  }
}
