/**
 * The one place sluice writes its log lines: one JSON object per line, `event` first, so a log
 * search (Workers Logs, `wrangler tail`) can filter on it. It imports nothing of the app, so any
 * layer may log.
 */

/** The fields of a log line beside `event`. */
export type LogFields = Record<string, unknown>;

/**
 * Something that happened (a decision, a ban, a rebalance): one JSON line on standard output.
 *
 * @example log("ban", { route: "api", limit: "per-ip", level: 1, until, id })
 */
export function log(event: string, fields: LogFields = {}): void {
  console.log(JSON.stringify({ event, ...fields }));
}

/**
 * Something that went wrong, told by its fields alone (a warning about the configuration, a
 * store error already described): one JSON line on standard error.
 *
 * @example logFailure("lists_jwt_unverifiable", { detail: "no key to verify tokens with" })
 */
export function logFailure(event: string, fields: LogFields = {}): void {
  console.error(JSON.stringify({ event, ...fields }));
}

/**
 * A failure with its error: the fields, then the error's `message`, on standard error.
 *
 * @example logError("queue_error", e, { job: id }) // {"event":"queue_error","job":"…","message":"…"}
 */
export function logError(event: string, error: unknown, fields: LogFields = {}): void {
  logFailure(event, { ...fields, message: messageOf(error) });
}

/** An error's message, or what was thrown in its place as text. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Deferred work (handed to `waitUntil`, or run without being awaited) whose failure must not
 * reach the request, but must be seen: it settles to `undefined` and logs `event` with the error.
 *
 * @example defer(settleQuietly(refund(r), "refund_failed", { route }))
 */
export function settleQuietly(work: Promise<unknown>, event: string, fields: LogFields = {}): Promise<undefined> {
  return work.then(
    () => undefined,
    (e: unknown) => {
      logError(event, e, fields);
      return undefined;
    },
  );
}

/**
 * Work whose failure is answered by a value: `fallback` on failure, with the failure logged.
 *
 * @example const released = await orElse(release(ref, owner), false, "session_release_failed", { route })
 */
export function orElse<T, F>(work: Promise<T>, fallback: F, event: string, fields: LogFields = {}): Promise<T | F> {
  return work.catch((e: unknown) => {
    logError(event, e, fields);
    return fallback;
  });
}

/**
 * Cancels a body nobody will read (a client that went away, a response replaced by another). Its
 * failure does not matter: the stream is being dropped either way, and cancelling one that has
 * already errored or closed rejects with nothing to act on.
 */
export async function discardBody(
  body: ReadableStream | ReadableStreamDefaultReader | null | undefined,
): Promise<void> {
  if (!body) return;
  try {
    await body.cancel();
  } catch {
    // dropped either way (see above)
  }
}
