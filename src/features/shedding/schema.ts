import * as z from "zod/mini";
import { deferred, lazy } from "../../config/lazy.js";
import { duration } from "../../config/primitives.js";
import {
  backoff,
  DEFAULT_MAX_RETRIES,
  DIVERT_REASONS,
  divertReasons,
  FALLBACK_COOKIES,
  ON_LIMIT,
  SHEDDING_DEFAULTS,
  queueDefaults,
  type DivertReason,
  type QueueSettings,
} from "./defaults.js";

/** What a fallback route answers with when it is shed and no cached copy exists ("sold out"). */
function staticFallback() {
  return z.strictObject({
    status: z._default(z.int().check(z.minimum(200), z.maximum(599)), 200),
    content_type: z._default(z.string().check(z.minLength(1), z.maxLength(200)), "text/plain; charset=utf-8"),
    body: z.string().check(z.maxLength(64 * 1024)),
  });
}

/**
 * A completion callback the route allows: an https URL, exact, or a prefix written with a trailing
 * `*` after at least the host and its `/` (so the host is always fixed).
 */
function callbackPattern() {
  return z.pipe(
    z.string(),
    z.transform((text: string, ctx) => {
      const prefix = text.endsWith("*");
      const body = prefix ? text.slice(0, -1) : text;
      let url: URL | undefined;
      try {
        url = new URL(body);
      } catch {
        url = undefined;
      }
      if (!url || url.protocol !== "https:" || url.username || url.password || body.includes("*")) {
        const message = `"${text}" is not an https URL (a trailing * allows any URL it begins)`;
        ctx.issues.push({ code: "custom", message, input: text });
        return z.NEVER;
      }
      return { url: url.href, prefix };
    }),
  );
}

/** The Queues API's longest delay (`delaySeconds`). */
const MAX_QUEUE_DELAY_MS = 43_200_000;

function queueFields() {
  return z
    .strictObject({
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
      /**
       * Deliveries that fail at the origin (5xx, network) before the job goes to the dead-letter
       * queue, retried after 1 s, 2 s, 4 s … (at most 60 s). `retry_delays` says it instead.
       */
      max_retries: z.optional(z.int().check(z.minimum(0), z.maximum(100))),
      /** The wait before each retry, in order: one entry per retry (the Queues delay, at most 12 h). */
      retry_delays: z.optional(
        z
          .array(z.pipe(duration(), z.number().check(z.maximum(MAX_QUEUE_DELAY_MS, "must be at most 12h"))))
          .check(z.maxLength(100)),
      ),
      /** Jobs waiting at most: past it a shed request gets the overflow answer (503, or the route's `fallback`). */
      max_depth: z.optional(z.int().check(z.minimum(1), z.maximum(100_000_000))),
      /**
       * Jobs one client may have waiting at most (the identity the refusing limit keys on, or the
       * IP): past it that client gets the overflow answer while others still queue. Default: a
       * tenth of `max_depth`, rounded up (none without `max_depth`).
       */
      max_per_client: z.optional(z.int().check(z.minimum(1), z.maximum(100_000_000))),
      /** A job older than this is dropped (to the dead-letter queue), never delivered late; at enqueue, a wait past it is overflow. */
      max_age: z.optional(z.pipe(duration(), z.number().check(z.minimum(1_000, "must be at least 1s")))),
      /** How long a job's status can be read. */
      status_ttl: z._default(duration(), 86_400_000),
      /** The completion callbacks (`Sluice-Callback`) a job may name; none allowed by default. */
      callbacks: z._default(z.array(callbackPattern()).check(z.maxLength(50)), []),
    })
    .check(z.superRefine(retryProblems));
}

/** The queue's fields that must agree with each other. */
interface QueueAgreement {
  retry_delays?: number[];
  max_retries?: number;
  max_depth?: number;
  max_per_client?: number;
}

/** `retry_delays` are the retries: a `max_retries` beside them must count them. A client's share fits in the queue. */
function retryProblems(q: QueueAgreement, ctx: z.core.$RefinementCtx) {
  if (q.retry_delays && q.max_retries !== undefined && q.max_retries !== q.retry_delays.length)
    ctx.addIssue({
      code: "custom",
      path: ["retry_delays"],
      message: `has ${q.retry_delays.length} entries but max_retries is ${q.max_retries}: give one of them (the entries are the retries)`,
    });
  if (q.max_depth !== undefined && q.max_per_client !== undefined && q.max_per_client > q.max_depth)
    ctx.addIssue({
      code: "custom",
      path: ["max_per_client"],
      message: `is ${q.max_per_client}, more than max_depth (${q.max_depth}): a client's share is part of the queue`,
    });
}

/**
 * The share of `max_depth` one client may hold when the route does not say: a tenth, rounded up,
 * so that no fewer than ten clients fill the queue. Without `max_depth`, no share.
 */
export const DEFAULT_CLIENT_SHARE = 0.1;

function clientShare(maxDepth: number | undefined, maxPerClient: number | undefined): number | undefined {
  if (maxPerClient !== undefined || maxDepth === undefined) return maxPerClient;
  return Math.max(1, Math.ceil(maxDepth * DEFAULT_CLIENT_SHARE));
}

export const queueSettings = /* @__PURE__ */ lazy(() =>
  z.pipe(
    queueFields(),
    z.transform(
      ({
        max_retries,
        retry_delays,
        max_per_client,
        ...rest
      }: z.output<ReturnType<typeof queueFields>>): QueueSettings => {
        const delays = retry_delays ?? backoff(max_retries ?? DEFAULT_MAX_RETRIES);
        const share = clientShare(rest.max_depth, max_per_client);
        return {
          ...rest,
          ...(share !== undefined ? { max_per_client: share } : {}),
          max_retries: delays.length,
          retry_delays: delays,
        };
      },
    ),
  ),
);

function divertOn() {
  return z.array(z.enum(DIVERT_REASONS)).check(
    z.minLength(1),
    z.refine((reasons: string[]) => new Set(reasons).size === reasons.length, "must not name a reason twice"),
  );
}

/**
 * A route's shedding options: what a refused request gets instead of a 429 (docs/shedding.md).
 * Those a route leaves out build no schema; a middleware's route, which has none to set, takes
 * `sheddingDefaults()` (./defaults.ts) instead.
 */
export const sheddingOptions = () => ({
  on_limit: z._default(z.enum(ON_LIMIT), SHEDDING_DEFAULTS.on_limit),
  /** Where `on_limit = "divert"` sends refused requests (a read replica, a static mirror, a cheaper model). */
  divert_url: z.optional(deferred(() => z.url({ protocol: /^https?$/, error: "must be an http or https URL" }))),
  /** When requests go to `divert_url` (default `["limit"]`, which is `on_limit = "divert"`). */
  divert_on: z.optional(deferred(divertOn)),
  /** Past it the divert origin is abandoned, and the refusal falls back (static page, else 429). */
  divert_timeout: z._default(duration(), SHEDDING_DEFAULTS.divert_timeout),
  fallback_ttl: z._default(duration(), SHEDDING_DEFAULTS.fallback_ttl),
  fallback: z.optional(deferred(staticFallback)),
  /**
   * "private": a response to a request with a cookie is not kept as a fallback copy unless the
   * origin marks it shareable (as with Authorization). "shared": the route's pages do not depend
   * on cookies, so they are kept.
   */
  fallback_cookies: z._default(z.enum(FALLBACK_COOKIES), SHEDDING_DEFAULTS.fallback_cookies),
  queue: z._default(deferred(queueSettings), queueDefaults),
});

/** A route's fields that decide where it diverts (the composition's tables among them). */
interface DivertFields {
  on_limit: string;
  divert_url?: string;
  divert_on?: DivertReason[];
  breaker?: unknown;
  idempotency?: unknown;
  session?: unknown;
}

/**
 * A divert route's fields go together: `"limit"` in `divert_on` is `on_limit = "divert"`, and
 * `"breaker"` needs a breaker. A route that diverts refusals takes no idempotency key or session
 * lock: a refused request leaves before those steps run, so it would reach the divert origin
 * unguarded. Failover (breaker, 5xx, timeout) goes after them, so it takes both.
 */
export function divertProblems(r: DivertFields): Array<[string, string]> {
  if (r.divert_url === undefined) {
    const problems: Array<[string, string]> = [];
    if (r.on_limit === "divert") problems.push(["divert_url", 'is required when on_limit = "divert"']);
    if (r.divert_on !== undefined) problems.push(["divert_on", "needs divert_url, the origin to divert to"]);
    return problems;
  }
  const reasons = divertReasons(r);
  const problems = reasonProblems(r, reasons);
  if (r.on_limit !== "divert") return problems;
  for (const table of ["idempotency", "session"] as const)
    if (r[table] !== undefined)
      problems.push([
        table,
        `cannot be combined with on_limit = "divert": a diverted request leaves before the ${table} step runs, unguarded (give those methods a route of their own)`,
      ]);
  return problems;
}

/** `divert_on` against `on_limit` and the breaker table. */
function reasonProblems(r: DivertFields, reasons: DivertReason[]): Array<[string, string]> {
  const limit = reasons.includes("limit");
  if (limit && r.on_limit !== "divert")
    return r.divert_on === undefined
      ? [
          [
            "divert_url",
            'applies only when on_limit = "divert", or with divert_on naming the failures to divert on (["breaker", "5xx", "timeout"])',
          ],
        ]
      : [["divert_on", `names "limit", which needs on_limit = "divert" (on_limit is "${r.on_limit}")`]];
  if (!limit && r.on_limit === "divert")
    return [["divert_on", 'must name "limit" when on_limit = "divert" (refused requests are diverted)']];
  if (reasons.includes("breaker") && r.breaker === undefined)
    return [["divert_on", 'names "breaker" but the route has no breaker table']];
  return [];
}
