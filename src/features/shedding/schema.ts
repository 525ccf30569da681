import * as z from "zod/mini";
import { duration } from "../../config/primitives.js";

/** What a fallback route answers with when it is shed and no cached copy exists ("sold out"). */
const staticFallback = z.strictObject({
  status: z._default(z.int().check(z.minimum(200), z.maximum(599)), 200),
  content_type: z._default(z.string().check(z.minLength(1), z.maxLength(200)), "text/plain; charset=utf-8"),
  body: z.string().check(z.maxLength(64 * 1024)),
});

const queueSettings = z.strictObject({
  /** Larger request bodies are refused with 413 rather than queued. */
  max_body: z._default(z.int().check(z.minimum(0), z.maximum(100 * 1024)), 64 * 1024),
  /** Request headers kept with the job (those a limit keys on are always kept). */
  headers: z._default(
    z.array(
      z.pipe(
        z.string().check(z.regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, "must be a header name")),
        z.transform((h: string) => h.toLowerCase()),
      ),
    ),
    ["content-type"],
  ),
  /** Deliveries that fail at the origin (5xx, network) before the job goes to the dead-letter queue. */
  max_retries: z._default(z.int().check(z.minimum(0), z.maximum(100)), 3),
  /** How long a job's status can be read. */
  status_ttl: z._default(duration, 86_400_000),
});

/** A route's shedding options: what a refused request gets instead of a 429 (docs/shedding.md). */
export const sheddingOptions = {
  on_limit: z._default(z.enum(["reject", "fallback", "queue", "divert"]), "reject"),
  /** Where `on_limit = "divert"` sends refused requests (a read replica, a static mirror, a cheaper model). */
  divert_url: z.optional(z.url({ protocol: /^https?$/, error: "must be an http or https URL" })),
  /** Past it the divert origin is abandoned, and the refusal falls back (static page, else 429). */
  divert_timeout: z._default(duration, 10_000),
  fallback_ttl: z._default(duration, 300_000),
  fallback: z.optional(staticFallback),
  /**
   * "private": a response to a request with a cookie is not kept as a fallback copy unless the
   * origin marks it shareable (as with Authorization). "shared": the route's pages do not depend
   * on cookies, so they are kept.
   */
  fallback_cookies: z._default(z.enum(["private", "shared"]), "private"),
  queue: z._default(queueSettings, () => queueSettings.parse({})),
};

/**
 * A divert route's fields go together, and it takes no idempotency key or session lock: a
 * diverted request leaves before those steps run, so it would reach the divert origin unguarded.
 */
export function divertProblems(r: {
  on_limit: string;
  divert_url?: string;
  idempotency?: unknown;
  session?: unknown;
}): Array<[string, string]> {
  if (r.on_limit !== "divert")
    return r.divert_url === undefined ? [] : [["divert_url", 'applies only when on_limit = "divert"']];
  const problems: Array<[string, string]> = [];
  if (r.divert_url === undefined) problems.push(["divert_url", 'is required when on_limit = "divert"']);
  for (const table of ["idempotency", "session"] as const)
    if (r[table] !== undefined)
      problems.push([
        table,
        `cannot be combined with on_limit = "divert": a diverted request leaves before the ${table} step runs, unguarded (give those methods a route of their own)`,
      ]);
  return problems;
}
