import { PROBLEMS, problemSlug, type ProblemHead } from "./problem-types.js";

/** What the page of one problem type says: for a client's developer, who followed the `type` link. */
export interface ProblemPage {
  /** What it means. */
  means: string;
  /** What a client should do about it. */
  todo: string;
  /** The headers and members worth reading, beside `Sluice-Decision` and `Sluice-Region`. */
  read: readonly string[];
}

/** A problem type with its page. */
export type ProblemType = ProblemHead & ProblemPage;

const RETRY = "Retry-After (seconds)";
const RATELIMIT = "RateLimit and RateLimit-Policy (the refusing limit)";

/**
 * The page of every problem type of ./problem-types.ts, by the same names: one left out (or
 * misnamed) does not compile. Only the admin's problem pages import this module.
 */
const PAGES: { readonly [K in keyof typeof PROBLEMS]: ProblemPage } = {
  tooManyRequests: {
    means: "A rate limit of this route refused the request: the client has used up what the limit allows for now.",
    todo: "Wait as long as Retry-After says (or retry_after_ms), then retry; spread requests out rather than retrying at once.",
    read: [RETRY, RATELIMIT, "limit and retry_after_ms (body)"],
  },
  forbidden: {
    means: "The client is on the deployment's deny list, put there by an operator or by a limit's automatic ban.",
    todo: "Do not retry: the request will be refused until the entry expires or an operator lifts it.",
    read: [],
  },
  badRequestForLimit: {
    means:
      "The request lacks what a limit identifies clients by (a header, cookie, query parameter or claim the limit requires), or carries a cost header out of bounds.",
    todo: "Send the identity the route requires, or a cost within the allowed range; retrying unchanged fails again.",
    read: ["limit (body)"],
  },
  rateLimiterUnavailable: {
    means:
      "The store that decides rate limits did not answer, and this deployment refuses requests rather than letting them through unlimited.",
    todo: "Retry after Retry-After; the condition is usually short.",
    read: [RETRY],
  },
  originUnavailable: {
    means:
      "The route's origin has been failing and its circuit breaker is open: sluice gives it time to recover instead of sending it more.",
    todo: "Retry after Retry-After (or retry_after_ms).",
    read: [RETRY, "retry_after_ms (body)"],
  },
  routeDegraded: {
    means:
      "The operator has switched this route to refuse every request for a while (an emergency degrade), whoever sends it and however fast.",
    todo: "Retry after Retry-After (or retry_after_ms): the switch ends by then at the latest.",
    read: [RETRY, "retry_after_ms (body)"],
  },
  badGateway: {
    means: "The origin could not be reached, or answered with no final response.",
    todo: "Retry later; a request that is not idempotent may or may not have reached the origin only when it answered something.",
    read: [],
  },
  gatewayTimeout: {
    means: "The origin did not answer within the route's origin_timeout; it may or may not have acted on the request.",
    todo: "Retry with the same Idempotency-Key if the route uses one, so a side effect happens once.",
    read: [],
  },
  badRequestPath: {
    means:
      "The request path cannot be put in normal form (an encoded slash, a dot segment past the root, path parameters the route refuses), or is too long (414).",
    todo: "Send a plain path; retrying unchanged fails again.",
    read: [],
  },
  invalidToken: {
    means:
      "The bearer token (a JWT) is missing where required, malformed, expired, or not signed by a key this deployment trusts.",
    todo: "Obtain a fresh token and send it as Authorization: Bearer <token>.",
    read: ["WWW-Authenticate"],
  },
  invalidIdempotencyKey: {
    means: "The Idempotency-Key header is not a valid key: it must be 1 to 255 printable ASCII characters.",
    todo: "Send a fresh, well-formed key, such as a UUID.",
    read: [],
  },
  idempotencyKeyRequired: {
    means: "This route runs side effects once per key, and the request carried no Idempotency-Key.",
    todo: "Send an Idempotency-Key header, the same one on every retry of the same operation.",
    read: [],
  },
  idempotencyFieldsMissing: {
    means:
      "This route makes its idempotency keys from fields of the JSON body (the same fields within a window are one request), and the body is not JSON or lacks one of them.",
    todo: "Send a JSON body with every field the route names; the detail and field say which one was missing.",
    read: ["field (body): the JSON pointer of the missing field"],
  },
  requestTooLarge: {
    means: "An idempotent request's body is too large to fingerprint and keep.",
    todo: "Send a smaller body.",
    read: [],
  },
  requestInFlight: {
    means: "A request with the same Idempotency-Key is still running.",
    todo: "Retry after Retry-After with the same key: you will get its answer once it is done.",
    read: [RETRY, "lease_left_ms (body)"],
  },
  completedAnswerNotStored: {
    means:
      "The request with this Idempotency-Key completed, but its answer was too large to keep; it will not run again.",
    todo: "Do not retry with this key; read the outcome from the service itself.",
    read: [],
  },
  outcomeIndeterminate: {
    means:
      "The request with this Idempotency-Key failed at the origin after it may have taken effect; an operator must resolve it.",
    todo: "Do not send it again with a new key before checking whether it took effect.",
    read: [RETRY],
  },
  idempotencyKeyReused: {
    means: "The Idempotency-Key was used before with a different request (method, path, query, principal or body).",
    todo: "Use a new key for a new operation.",
    read: [],
  },
  tooManyReplays: {
    means:
      "The request repeats one that already completed, and this client has been answered with stored answers as often as the route allows for now (replays are bounded per client, apart from the rate limits).",
    todo: "Stop repeating completed requests; the stored answer is still there after Retry-After.",
    read: [RETRY, "retry_after_ms (body)"],
  },
  sessionBusy: {
    means: "Another side-effecting call of the same session is in flight: calls of one session run one at a time.",
    todo: "Retry after Retry-After, once the other call has finished.",
    read: [RETRY, "lease_left_ms (body)"],
  },
  coordinationStoreUnavailable: {
    means: "Idempotency records or session locks could not be reached, so the request was not run.",
    todo: "Retry after Retry-After with the same Idempotency-Key.",
    read: [RETRY],
  },
  identityUnavailable: {
    means:
      "The request's idempotency key or session belongs to its caller, named by its bearer token, but the keys that check the token's signature could not be had just now (the issuer's key set could not be fetched), so the request was not run rather than filed under another caller.",
    todo: "Retry after Retry-After with the same token and Idempotency-Key.",
    read: [RETRY],
  },
  queueNotBound: {
    means: "The route sheds refused requests to a queue, but the deployment has no queue configured.",
    todo: "Nothing on the client's side: tell the operator.",
    read: [],
  },
  requestTooLargeToQueue: {
    means:
      "The request was refused by a limit and would have been queued, but its body (or the whole job, with the headers and claims it keeps) is too large to queue.",
    todo: "Retry later with the same request, or send a smaller body.",
    read: [],
  },
  queueFull: {
    means:
      "The request was refused by a limit and would have been queued, but the route's queue already holds as many jobs as it may, or as many of this client's as one client may have waiting (reason max_per_client), or the wait would be longer than a job may be kept.",
    todo: "Retry after Retry-After (or retry_after_ms); the queue drains at the route's limit.",
    read: [RETRY, RATELIMIT, "reason and retry_after_ms (body)"],
  },
  callbackNotAllowed: {
    means:
      "The request would have been queued with a completion callback (Sluice-Callback), but the URL is not an https URL the route allows.",
    todo: "Send a callback URL the route's allowlist names, or none; retrying unchanged fails again.",
    read: [],
  },
  noSuchJob: {
    means: "The job id is not one sluice issued, or its status has expired.",
    todo: "Use the id from the Location of the 202 answer, within the route's status TTL.",
    read: [],
  },
  jobStatusUnavailable: {
    means: "The store holding queued jobs' status could not be reached.",
    todo: "Ask again after Retry-After.",
    read: [RETRY],
  },
  invalidConfiguration: {
    means: "The deployment's configuration is invalid; every request gets this answer until it is fixed.",
    todo: "Nothing on the client's side. The operator finds the field to fix in the Worker's log (config_invalid), in npm run check, or in this answer asked with the admin token.",
    read: ["field and problem (body, with the admin token only)"],
  },
  internalError: {
    means: "sluice failed to handle the request.",
    todo: "Retry later; tell the operator if it persists.",
    read: [],
  },
  notFound: {
    means: "No such admin route, no such problem type, or the admin API is off (no admin token set).",
    todo: "Check the path.",
    read: [],
  },
  unauthorized: {
    means: "The admin API needs the admin token (Authorization: Bearer) or a dashboard session.",
    todo: "Send the token, or sign in on the dashboard.",
    read: ["WWW-Authenticate"],
  },
  tooManyFailedAuthentications: {
    means: "Too many failed admin authentications came from this client: nothing is compared until the window ends.",
    todo: "Wait as long as Retry-After says before trying again.",
    read: [RETRY, "retry_after_ms (body)"],
  },
  jsonRequired: {
    means: "A change made with the dashboard's session must carry a JSON body (a cross-site form cannot).",
    todo: "Send Content-Type: application/json.",
    read: [],
  },
  dashboardSessionsUnavailable: {
    means:
      "Dashboard sessions are checked against their record in the home region's Redis, which could not be reached: no session is opened or admitted without that check.",
    todo: "Retry shortly, or use the admin API with Authorization: Bearer <SLUICE_ADMIN_TOKEN>.",
    read: [],
  },
  invalidRequest: {
    means: "The admin request's body, path or query failed validation.",
    todo: "Correct what the detail names.",
    read: [],
  },
  noSuchLimit: {
    means: "The admin request names a route or limit the configuration does not have.",
    todo: "Check the names against GET /__sluice/config.",
    read: [],
  },
  noSuchRoute: {
    means: "The admin request names a route that does not have what was asked for (idempotency).",
    todo: "Check the names against GET /__sluice/config.",
    read: [],
  },
  noSuchKey: {
    means: "No idempotency record exists for this route, principal and key.",
    todo: "Check the key, principal and route.",
    read: [],
  },
  noSuchBucket: {
    means: "The admin request does not name a bucket of this route and limit.",
    todo: "Check the identity against the limit's key parts.",
    read: [],
  },
  storeUnavailable: {
    means: "The admin API needs the home region's Redis and has none configured.",
    todo: "Nothing on the client's side: tell the operator.",
    read: [],
  },
  redisNotConfigured: {
    means:
      "The route is guarded by sluice, and the Worker has no Redis it can decide it with: a variable naming the Redis (named in variable) is not set, or is wrong (the database refused the token, or the URL is not its REST URL). Without it no limit could hold across isolates, so sluice refuses rather than guess.",
    todo: "Nothing on the client's side: tell the operator, who sets the variable named in variable (wrangler secret put).",
    read: ["variable (the setting to fix)", "missing (when it is not set)"],
  },
  metricsUnavailable: {
    means: "Metrics are kept in the home region's Redis, and there is none configured.",
    todo: "Nothing on the client's side: tell the operator.",
    read: [],
  },
  ledgerUnavailable: {
    means: "The ledger is kept in the home region's Redis, and there is none configured.",
    todo: "Nothing on the client's side: tell the operator.",
    read: [],
  },
};

/** The catalogue keyed by slug, each type with its page. */
function bySlug(): ReadonlyMap<string, ProblemType> {
  return new Map(
    (Object.keys(PROBLEMS) as Array<keyof typeof PROBLEMS>).map((name): [string, ProblemType] => {
      const head = PROBLEMS[name];
      return [problemSlug(head.title), { ...head, ...PAGES[name] }];
    }),
  );
}

/** The problem types by their slug (the last segment of `type`), in the catalogue's order. */
export const PROBLEM_TYPES: ReadonlyMap<string, ProblemType> = bySlug();
