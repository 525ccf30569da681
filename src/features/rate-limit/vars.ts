/**
 * The rate limiter's result, as its adapter (./step.ts) publishes it on Hono's context: typed on
 * every context (`c.get("sluiceLimits")`), as hono's own middleware type theirs.
 */

/** One limit as the rate limiter decided it, as far as its readers go (./types.ts `LimitOutcome`). */
export interface DecidedLimit {
  limit: { name: string };
  allowed: boolean;
  remaining: number;
  resetMs: number;
  retryAfterMs: number;
}

/** The rate limiter's decision on a request: the handler's view (`c.get("sluice").limits`) and the decision's count read it. */
export interface LimitSummary {
  outcomes: readonly DecidedLimit[];
  /** Decided without Redis's answer (Redis failed; `open` or `local`). */
  degraded: boolean;
  /** Answered by the isolate alone (the blocked-bucket cache, leases): no central call. */
  withoutRedis: boolean;
  /** When it was decided (epoch ms): what each outcome's `resetMs` counts from. */
  decidedAt: number;
}

declare module "hono" {
  interface ContextVariableMap {
    /** The rate limiter's decision: the last one made on the request (the mount nearest the handler that decided one). */
    sluiceLimits: LimitSummary | undefined;
  }
}
