/**
 * Raised when Redis did not answer within the decision's budget, could not be reached, answered
 * with an error, or was not even asked: its circuit is open after repeated failures (circuit.ts).
 * `misconfigured` is no outage but the deployment's mistake, and is never answered as one: the
 * database refused the credentials (HTTP 401/403), or the URL cannot be a REST endpoint
 * (`redis://`, no scheme). `variable` then names the setting to fix (`UPSTASH_REDIS_REST_TOKEN`,
 * a middleware's `redis.url`); the message names it too, and never carries a secret.
 */
export class StoreError extends Error {
  constructor(
    readonly reason: "timeout" | "unreachable" | "error" | "circuit_open" | "misconfigured",
    message: string,
    readonly variable?: string,
  ) {
    super(message);
    this.name = "StoreError";
  }
}

/** Whether `e` is the deployment's mistake rather than an outage (see `StoreError`). */
export function isMisconfigured(e: unknown): e is StoreError & { reason: "misconfigured" } {
  return e instanceof StoreError && e.reason === "misconfigured";
}

/**
 * Settles with `work`, or rejects with a `StoreError("timeout")` once `ms` have passed,
 * whichever is first. The HTTP request itself is aborted by the client's own signal; this is
 * the hard bound on the whole exchange (an EVALSHA answered NOSCRIPT, then EVAL, is two requests).
 */
export async function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StoreError("timeout", `no answer from Redis within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, expired]);
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
}
