import type { Context } from "hono";
import type { Scope, SluiceEnv } from "../../context.js";
import { clientLabel } from "../../metrics/labels.js";
import { idKeyOf, pseudonym } from "../../identity/pseudonym.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { allowance, rateLimitHeaders, retryAfterSeconds } from "../rate-limit/headers.js";
import type { Decision } from "../rate-limit/types.js";

export type Refusal = Extract<Decision, { verdict: "reject" }>;

/**
 * How a refused request is answered: the gateway sheds it as the route's `on_limit` says
 * (./step.ts), the `rateLimit()` middleware, which has no `on_limit`, refuses
 * it (`reject`), so an app using it alone carries none of the queue, fallback or divert code.
 */
export type Shed = (c: Context<SluiceEnv>, scope: Scope, refusal: Refusal) => Promise<Response>;

/**
 * The refusing limit and client, for the request's log line and the dashboard: the client by the
 * keyed id of its bucket (`pseudonym`), never the bucket's plain hash, which a guess could be
 * tested against.
 */
export async function noteRefusal(scope: Scope, refusal: Refusal): Promise<void> {
  if (!scope.meta) return;
  scope.meta.limit = refusal.blocking.limit.name;
  const hash = refusal.blocking.key.slice(refusal.blocking.key.lastIndexOf(":") + 1);
  scope.meta.blockedId = await pseudonym(idKeyOf(scope.env), hash);
  scope.meta.label = clientLabel(refusal.blocking.limit, scope.facts, scope.config.labels);
}

/** The 429 problem for a refusal, with `Retry-After` and the refusing limit's `RateLimit` headers. */
export function tooManyRequests(refusal: Refusal, route: string): Problem {
  const { limit, retryAfterMs } = refusal.blocking;
  return new Problem({
    type: PROBLEMS.tooManyRequests,
    detail: `limit "${limit.name}" of route "${route}" ${allowance(limit)}; retry in ${retryAfterMs} ms`,
    extensions: { limit: limit.name, retry_after_ms: retryAfterMs },
    headers: { "Retry-After": String(retryAfterSeconds(retryAfterMs)), ...rateLimitHeaders([refusal.blocking]) },
  });
}

/** `on_limit = "reject"`, the only way a refusal is answered outside the gateway: the 429 problem. */
export const reject: Shed = async (_c, scope, refusal) => {
  await noteRefusal(scope, refusal);
  throw tooManyRequests(refusal, scope.route?.name ?? "-");
};

export function withHeaders(res: Response, headers: Record<string, string>): Response {
  for (const [k, v] of Object.entries(headers)) res.headers.set(k, v);
  return res;
}
