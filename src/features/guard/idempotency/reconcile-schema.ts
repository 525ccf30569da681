import * as z from "zod/mini";
import { duration } from "../../../config/primitives.js";
import { reconcileTemplateProblem } from "./reconcile-url.js";

/**
 * The reconciliation fields of an `idempotency` table (docs/idempotency-and-sessions.md,
 * Reconciliation): where sluice asks the origin what became of an indeterminate key, how long it
 * waits for the answer, and how long a key stays indeterminate before the cron asks about it.
 */
export function reconcileFields() {
  return {
    /** `"/orders/by-key/{key}"` on the route's origin, or an https URL on an allowed host; none: keys wait for an operator. */
    reconcile: z.optional(
      z.string().check(
        z.superRefine((template: string, ctx) => {
          const problem = reconcileTemplateProblem(template);
          if (problem) ctx.addIssue({ code: "custom", message: problem, input: template });
        }),
      ),
    ),
    /** How long one reconcile question may take; no answer by then is "still unknown". */
    reconcile_timeout: z._default(duration(), 2_000),
    /** How long a key stays indeterminate before the cron trigger asks about it (a duplicate asks at once). */
    reconcile_after: z._default(duration(), 60_000),
  };
}
