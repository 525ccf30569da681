import { Problem } from "../../../problem.js";

/**
 * A duplicate refused for its key (409 in flight or indeterminate, 422 mismatch): counted in
 * `sluice_idempotency_total`, not among the limits' `decision="reject"`. A module of its own, so
 * that what stamps every decision (src/pipeline/stamp.ts) can tell one without importing idempotency.
 */
export class IdempotencyRefusal extends Problem {}
