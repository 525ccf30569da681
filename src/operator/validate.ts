import type { Context } from "hono";
import { validator } from "hono/validator";
import { z } from "zod";
import { parseDuration } from "../config/duration.js";
import { Problem } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";

/** A duration as the configuration writes them (`"500ms"`, `"10m"`, `"1d"`). */
export const duration = z.string().refine((t) => parseDuration(t) !== undefined, 'must be a duration like "10m"');

/**
 * A status an answer can be replayed with: a final status (`new Response` refuses 1xx, and a
 * `101` would switch protocols), and no more than HTTP has (599).
 */
export const replayableStatus = z.number().int().min(200, "must be a final status, 200 to 599").max(599);

/** Statuses whose responses carry no content (RFC 9110 §15.3.5, §15.3.6, §15.4.5): a body with them cannot be sent. */
export const BODILESS_STATUSES: ReadonlySet<number> = new Set([204, 205, 304]);

/**
 * A header value as a response can carry it: visible ASCII, spaces and tabs inside, nothing
 * around (`new Response` refuses a line break or a character past one byte).
 */
export const headerValue = z
  .string()
  .max(200)
  .regex(/^[\x21-\x7e]([\t\x20-\x7e]*[\x21-\x7e])?$/, "must be a header value: visible ASCII characters");

/** The media types Hono's JSON validator parses (`application/json`, `application/*+json`). */
const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;

/**
 * The request's JSON body, checked against `schema`; a body that does not pass is a 400 problem
 * naming the first offending field (`rate: Too big: ...`, or `body: ...` for the body as a whole).
 * Read it in the handler with `c.req.valid("json")`.
 *
 * With the bearer token the admin API has always read the body as JSON whatever its
 * Content-Type says (`curl -d` sends `application/x-www-form-urlencoded`), so a body Hono's
 * validator skips for its media type is parsed here; changes made with the dashboard's cookie
 * must say JSON, which the guard checks before this runs. A JSON media type with a body that does
 * not parse is refused by Hono itself, and answered as a 400 problem by the admin's `onError`.
 *
 * @example admin.put("/", jsonBody(listBody), (c) => c.json(c.req.valid("json")))
 */
export function jsonBody<S extends z.ZodType>(schema: S) {
  return validator("json", async (value: unknown, c: Context): Promise<z.output<S>> => {
    const body = JSON_MEDIA_TYPE.test(mediaType(c)) ? value : await jsonOrNothing(c);
    const parsed = schema.safeParse(body);
    if (!parsed.success) throw invalidRequest(parsed.error);
    return parsed.data;
  });
}

/** The login form's token field ("" when the body is not a form or has none, which compares as wrong). */
export const loginForm = validator("form", (value) => ({ token: typeof value.token === "string" ? value.token : "" }));

/** The 400 problem for a body that failed its schema: the first issue, with the path of its field. */
export function invalidRequest(error: z.ZodError): Problem {
  const issue = error.issues[0];
  return badRequest(issue ? `${issue.path.map(String).join(".") || "body"}: ${issue.message}` : "the body is not JSON");
}

/** A 400 problem with the admin API's one title for malformed input. */
export function badRequest(detail: string): Problem {
  return new Problem({ type: PROBLEMS.invalidRequest, detail });
}

function mediaType(c: Context): string {
  return (c.req.header("content-type") ?? "").split(";")[0]?.trim() ?? "";
}

/**
 * The body as JSON, or `undefined` when it is none: not a failure to log, but a client's bad
 * input, which the schema then refuses with a 400 that says what is missing.
 */
async function jsonOrNothing(c: Context): Promise<unknown> {
  try {
    return await c.req.json<unknown>();
  } catch {
    return undefined;
  }
}
