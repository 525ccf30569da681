/*
 * The problems the shedder answers with when nothing stands in for the origin (src/features/shedding/shedder.ts):
 * each reason's last word. The 429 of a refusal is the rate limiter's own (rate-limit/refusal.ts).
 */
import type { Route } from "../../config/index.js";
import { Problem, retryAfterSeconds } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { rateLimitHeaders } from "../rate-limit/headers.js";
import type { Refusal } from "../rate-limit/refusal.js";
import type { Overflow } from "./queue/enqueue.js";

/** The operator's degrade switch as the shedder answers it: its mode, and when it ends by itself (epoch ms). */
export interface SwitchedMode {
  mode: "fallback" | "reject" | "divert" | "open";
  until: number;
}

/**
 * 503, not 429: the client is over no limit of its own, the operator has taken the route out of
 * service; `Retry-After` is when the switch ends by itself.
 */
export function switchedProblem(route: Route, switched: SwitchedMode): Problem {
  const retryAfterMs = Math.max(0, switched.until - Date.now());
  return new Problem({
    type: PROBLEMS.routeDegraded,
    detail: `route "${route.name}" is switched to "${switched.mode}" by the operator for ${retryAfterMs} ms more`,
    extensions: { mode: switched.mode, retry_after_ms: retryAfterMs },
    headers: { "Retry-After": String(retryAfterSeconds(retryAfterMs)) },
  });
}

/** The breaker is open and nothing stands in: the origin is given `retryAfterMs` to recover. */
export function breakerOpenProblem(route: Route, retryAfterMs: number): Problem {
  return new Problem({
    type: PROBLEMS.originUnavailable,
    detail: `the origin of route "${route.name}" is failing; sluice is giving it ${retryAfterMs} ms to recover`,
    extensions: { retry_after_ms: retryAfterMs },
    headers: { "Retry-After": String(retryAfterSeconds(retryAfterMs)) },
  });
}

/**
 * The queue cannot take the request. Its Retry-After is the limit's: the consumer drains the queue
 * at the limit's rate, so a place frees about when a token does.
 */
export function queueFullProblem(route: Route, refusal: Refusal, reason: Overflow): Problem {
  const { retryAfterMs } = refusal.blocking;
  return new Problem({
    type: PROBLEMS.queueFull,
    detail: `the queue of route "${route.name}" ${why(route, reason, retryAfterMs)}; retry in ${retryAfterMs} ms`,
    extensions: { reason: REASON[reason], retry_after_ms: retryAfterMs },
    headers: { "Retry-After": String(retryAfterSeconds(retryAfterMs)), ...rateLimitHeaders([refusal.blocking]) },
  });
}

/** Each overflow as the problem's `reason` names it (the setting it hit). */
const REASON = { depth: "max_depth", client: "max_per_client", age: "max_age" } as const;

function why(route: Route, reason: Overflow, retryAfterMs: number): string {
  if (reason === "depth") return `holds queue.max_depth = ${route.queue.max_depth} jobs`;
  if (reason === "client")
    return `holds this client's share, queue.max_per_client = ${route.queue.max_per_client} jobs (other clients may still queue)`;
  return `would keep the job ${retryAfterMs} ms, past queue.max_age = ${route.queue.max_age} ms`;
}
