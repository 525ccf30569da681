/**
 * The one place sluice writes its log lines: one JSON object per line, `event` first, so a log
 * search (Workers Logs, `wrangler tail`) can filter on it. It imports nothing of the app, so any
 * layer may log. Every text of a line goes through `redact` first: an error's message may quote a
 * URL with its password (a runtime's fetch error does) or a bearer token, and none may be logged.
 */

/** The fields of a log line beside `event`. */
export type LogFields = Record<string, unknown>;

/**
 * Something that happened (a decision, a ban, a rebalance): one JSON line on standard output.
 *
 * @example log("ban", { route: "api", limit: "per-ip", level: 1, until, id })
 */
export function log(event: string, fields: LogFields = {}): void {
  console.log(line(event, fields));
}

/**
 * Something that went wrong, told by its fields alone (a warning about the configuration, a
 * store error already described): one JSON line on standard error.
 *
 * @example logFailure("lists_jwt_unverifiable", { detail: "no key to verify tokens with" })
 */
export function logFailure(event: string, fields: LogFields = {}): void {
  console.error(line(event, fields));
}

/** One log line: the event and its fields as JSON, every string redacted. */
function line(event: string, fields: LogFields): string {
  return JSON.stringify({ event, ...fields }, (_key, value: unknown) =>
    typeof value === "string" ? redact(value) : value,
  );
}

/** `scheme://user:password@`: the credentials of a URL (anything up to the last `@` of its authority). */
const URL_CREDENTIALS = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#@"']*@/gi;
/** `?token=…`, `&_token=…`, `key=`, `secret=`, …: a credential in a query string. */
const QUERY_SECRETS =
  /([?&](?:_?token|access_token|api[_-]?key|key|secret|password|passwd|pass|auth|sig|signature)=)[^&#\s"']*/gi;
/** `Bearer <token>`, `Basic <credentials>`: an Authorization header's value. */
const AUTH_VALUES = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/g;

/**
 * A text without the secrets it may quote: the user and password of URLs, credentials in query
 * strings, and bearer or basic credentials, each replaced with `***`.
 *
 * @example redact("Fetch API cannot load: rediss://default:abc@eu1.upstash.io:6379") // "… rediss://***@eu1.upstash.io:6379"
 */
export function redact(text: string): string {
  // most lines quote nothing of the kind: three cheap tests before any rewriting
  if (!text.includes("@") && !text.includes("=") && !/Bearer|Basic/.test(text)) return text;
  return text.replace(URL_CREDENTIALS, "$1***@").replace(QUERY_SECRETS, "$1***").replace(AUTH_VALUES, "$1 ***");
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
