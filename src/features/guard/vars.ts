/**
 * The guards' result, as their adapters (./step.ts, and the MCP adapter's guarded call) publish it
 * on Hono's context: typed on every context (`c.get("sluiceGuards")`), as hono's own middleware
 * type theirs.
 */

/**
 * What the guards hold for a request, once its claim or lock is held: the origin's forwarding,
 * failover, the divert switch and the handler's view read it.
 */
export interface GuardsHeld {
  /** Headers sluice tells the origin: fencing token, Idempotency-Key, Sluice-Session. */
  readonly sluiceHeaders: Readonly<Record<string, string>>;
  /** How long the origin's answer is still awaited past `origin_timeout` (a held guard must learn what it did). */
  readonly lateAnswerMs?: number;
  /** The request's body is in memory (read whole to fingerprint an idempotency key): it can be sent a second time. */
  readonly bodyKept?: boolean;
}

declare module "hono" {
  interface ContextVariableMap {
    /** What the guards hold for the request (none: nothing guarded). */
    sluiceGuards: GuardsHeld | undefined;
  }
}
