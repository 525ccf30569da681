import type { LimitOutcome } from "../types.js";

/** The refusal that lasts longest is the honest Retry-After: the request needs every limit. */
export function longestWait(outcomes: LimitOutcome[]): LimitOutcome {
  return outcomes.reduce((a, b) =>
    b.retryAfterMs < 0 || (a.retryAfterMs >= 0 && b.retryAfterMs > a.retryAfterMs) ? b : a,
  );
}
