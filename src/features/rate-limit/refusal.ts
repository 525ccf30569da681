import { Problem, retryAfterSeconds } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { allowance, rateLimitHeaders } from "./headers.js";
import type { Decision } from "./types.js";

/** A decision that refused the request. */
export type Refusal = Extract<Decision, { verdict: "reject" }>;

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

export function withHeaders(res: Response, headers: Record<string, string>): Response {
  for (const [k, v] of Object.entries(headers)) res.headers.set(k, v);
  return res;
}
