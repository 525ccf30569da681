/** A problem type as a response needs it: its title (fixed per type) and the statuses it comes with. */
export interface ProblemHead {
  title: string;
  /** The status codes it comes with: the first unless the problem says otherwise. */
  status: readonly [number, ...number[]];
}

/**
 * The name of a problem type, from its title (fixed per type): what follows the base in `type`.
 *
 * @example problemSlug("Too many requests") // "too-many-requests"
 */
export function problemSlug(title: string): string {
  return title
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "");
}

/**
 * Every problem type sluice answers with: the one place its title and status are written (`type`
 * is the deployment's `problem_base` and the title's slug; its page, what it means and what to do,
 * is in ./problem-pages.ts, which only the page-serving admin route loads, so a Worker using
 * `rateLimit` alone carries no page text). Code names a problem by its constant
 * (`PROBLEMS.tooManyRequests`), never by its title, so a problem without a page fails to compile;
 * src/problem-types.test.ts checks that no title is written anywhere else in src/.
 */
export const PROBLEMS = {
  tooManyRequests: { title: "Too many requests", status: [429] },
  forbidden: { title: "Forbidden", status: [403] },
  badRequestForLimit: { title: "Bad request for limit", status: [400] },
  rateLimiterUnavailable: { title: "Rate limiter unavailable", status: [503] },
  originUnavailable: { title: "Origin unavailable", status: [503] },
  routeDegraded: { title: "Route degraded", status: [503] },
  badGateway: { title: "Bad gateway", status: [502] },
  gatewayTimeout: { title: "Gateway timeout", status: [504] },
  badRequestPath: { title: "Bad request path", status: [400, 414] },
  invalidToken: { title: "Invalid token", status: [401] },
  invalidIdempotencyKey: { title: "Invalid Idempotency-Key", status: [400] },
  idempotencyKeyRequired: { title: "Idempotency-Key required", status: [400] },
  idempotencyFieldsMissing: { title: "Idempotency fields missing", status: [400] },
  requestTooLarge: { title: "Request too large", status: [413] },
  requestInFlight: { title: "Request in flight", status: [409] },
  completedAnswerNotStored: { title: "Completed, answer not stored", status: [409] },
  outcomeIndeterminate: { title: "Outcome indeterminate", status: [409] },
  idempotencyKeyReused: { title: "Idempotency-Key reused", status: [422] },
  tooManyReplays: { title: "Too many replays", status: [429] },
  sessionBusy: { title: "Session busy", status: [409] },
  coordinationStoreUnavailable: { title: "Coordination store unavailable", status: [503] },
  identityUnavailable: { title: "Identity unavailable", status: [503] },
  queueNotBound: { title: "Queue not bound", status: [500] },
  requestTooLargeToQueue: { title: "Request too large to queue", status: [413] },
  queueFull: { title: "Queue full", status: [503] },
  callbackNotAllowed: { title: "Callback not allowed", status: [400] },
  noSuchJob: { title: "No such job", status: [404] },
  jobStatusUnavailable: { title: "Job status unavailable", status: [503] },
  invalidConfiguration: { title: "Invalid sluice configuration", status: [500] },
  internalError: { title: "Internal error", status: [500] },
  notFound: { title: "Not found", status: [404] },
  unauthorized: { title: "Unauthorized", status: [401] },
  tooManyFailedAuthentications: { title: "Too many failed authentications", status: [429] },
  jsonRequired: { title: "JSON required", status: [415] },
  dashboardSessionsUnavailable: { title: "Dashboard sessions unavailable", status: [503] },
  invalidRequest: { title: "Invalid request", status: [400] },
  noSuchLimit: { title: "No such limit", status: [404] },
  noSuchRoute: { title: "No such route", status: [404] },
  noSuchKey: { title: "No such key", status: [404] },
  noSuchBucket: { title: "No such bucket", status: [404] },
  storeUnavailable: { title: "Store unavailable", status: [503] },
  redisNotConfigured: { title: "Redis not configured", status: [500] },
  metricsUnavailable: { title: "Metrics unavailable", status: [503] },
  ledgerUnavailable: { title: "Ledger unavailable", status: [503] },
} as const satisfies Record<string, ProblemHead>;

/** One problem type of the catalogue: what a `Problem` is made of. */
export type ProblemKind = (typeof PROBLEMS)[keyof typeof PROBLEMS];
