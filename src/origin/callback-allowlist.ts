/*
 * The allowlist of URLs a route may call besides its origin: a queued job's completion callbacks
 * (`queue.callbacks`, src/features/shedding/queue/callback.ts), and the hosts a reconcile URL may
 * be on (src/features/guard/idempotency/reconcile-url.ts). Below the capabilities, beside the
 * forwarding to the origin, because two of them ask it; free of the configuration, so the
 * configuration's checks can use it.
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
