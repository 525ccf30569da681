import type { FieldCounter } from "../../../metrics/idempotency.js";
import { countQueue } from "../../../metrics/queue.js";
import type { Overflow } from "./enqueue.js";

/**
 * Counts a shed request the queue cannot take (full, its client's share full, or the wait past
 * `max_age`); the shedder answers it then, as the breaker and a failed divert are answered (the
 * route's `fallback` page, else a 503 problem with the limit's Retry-After).
 */
export function countOverflow(metrics: FieldCounter, route: string, reason: Overflow): void {
  countQueue(metrics, route, SHED[reason]);
}

/** Each overflow as counted. */
const SHED = { depth: "shed_depth", client: "shed_client", age: "shed_age" } as const;
