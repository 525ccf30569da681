import type { Context } from "hono";
import type { Route } from "../../../config/index.js";
import type { Scope } from "../../../context.js";
import { Problem, retryAfterSeconds } from "../../../problem.js";
import { PROBLEMS } from "../../../problem-types.js";
import { rateLimitHeaders } from "../../rate-limit/headers.js";
import type { Decision } from "../../rate-limit/types.js";
import { fallbackFor } from "../fallback/answer.js";
import { countQueue } from "../../../metrics/queue.js";
import type { Overflow } from "./enqueue.js";

type Refusal = Extract<Decision, { verdict: "reject" }>;

/**
 * A shed request the queue cannot take (full, its client's share full, or the wait past `max_age`): counted, then the
 * route's `fallback` page, as the breaker and a failed divert fall back, else a 503 problem. Its
 * Retry-After is the limit's: the consumer drains the queue at the limit's rate, so a place frees
 * about when a token does.
 */
export async function overflowAnswer(
  c: Context,
  scope: Scope,
  route: Route,
  refusal: Refusal,
  reason: Overflow,
): Promise<Response> {
  countQueue(scope.runtime.metrics, route.name, SHED[reason]);
  const limits = rateLimitHeaders([refusal.blocking]);
  const fallback = await fallbackFor(c, scope);
  if (fallback) {
    scope.decision = "fallback";
    for (const [k, v] of Object.entries(limits)) fallback.headers.set(k, v);
    return fallback;
  }
  const { retryAfterMs } = refusal.blocking;
  throw new Problem({
    type: PROBLEMS.queueFull,
    detail: `the queue of route "${route.name}" ${why(route, reason, retryAfterMs)}; retry in ${retryAfterMs} ms`,
    extensions: { reason: REASON[reason], retry_after_ms: retryAfterMs },
    headers: { "Retry-After": String(retryAfterSeconds(retryAfterMs)), ...limits },
  });
}

/** Each overflow as counted, and as the problem's `reason` names it (the setting it hit). */
const SHED = { depth: "shed_depth", client: "shed_client", age: "shed_age" } as const;
const REASON = { depth: "max_depth", client: "max_per_client", age: "max_age" } as const;

function why(route: Route, reason: Overflow, retryAfterMs: number): string {
  if (reason === "depth") return `holds queue.max_depth = ${route.queue.max_depth} jobs`;
  if (reason === "client")
    return `holds this client's share, queue.max_per_client = ${route.queue.max_per_client} jobs (other clients may still queue)`;
  return `would keep the job ${retryAfterMs} ms, past queue.max_age = ${route.queue.max_age} ms`;
}
