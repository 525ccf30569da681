/**
 * Raised when Redis did not answer within the decision's budget, could not be reached, answered
 * with an error, or was not even asked: its circuit is open after repeated failures (circuit.ts).
 */
export class StoreError extends Error {
  constructor(
    readonly reason: "timeout" | "unreachable" | "error" | "circuit_open",
    message: string,
  ) {
    super(message);
    this.name = "StoreError";
  }
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
