/*
 * The allowlist of URLs a route may call besides its origin: a queued job's completion callbacks
 * (`queue.callbacks`), and the hosts a reconcile URL may be on (src/features/guard/idempotency/reconcile-url.ts).
 * A module of its own, free of the configuration, so the configuration's checks can use it.
 */

/** An allowlist entry: an exact https URL, or a prefix (written with a trailing `*`). */
export interface CallbackPattern {
  url: string;
  prefix: boolean;
}

/** Whether `url` (normalised) is one the allowlist names. */
export function callbackAllowed(url: string, patterns: readonly CallbackPattern[]): boolean {
  return patterns.some((p) => (p.prefix ? url.startsWith(p.url) : url === p.url));
}
