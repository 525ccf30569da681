import type { ListEntry } from "./lists-store.js";

/**
 * Where a ban finds the isolate's copy of the lists, when a middleware that applies or manages them
 * made one (`listsOf`, lists.ts): owned by the runtime apart from the copy's class, so that a
 * Worker that bans but applies no lists (`rateLimit()` alone) carries none of the copy's code.
 */
export class ListsInForce {
  /** The copy, when there is one: a ban puts its entry in force in it at once. */
  copy?: { add(prefix: string, entry: ListEntry): void };
}
