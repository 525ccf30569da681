import * as z from "zod/mini";
import { deferred, lazy } from "../../../config/lazy.js";
import { duration } from "../../../config/primitives.js";
import { MAX_IN_FLIGHT } from "../algorithms/registry.js";
import { limit, reserve } from "../schema.js";

/**
 * A route's `adaptive` in-flight limit for its origin (docs/algorithms.md, Adaptive limit; src/features/rate-limit/adaptive/):
 * the limit moves with the origin's latency at `latency` (a percentile) towards `target`, or,
 * without one, towards `tolerance` times the latency it learns the origin has unloaded.
 */
const slots = /* @__PURE__ */ lazy(() => z.int().check(z.positive(), z.maximum(MAX_IN_FLIGHT)));

export const adaptiveSettings = /* @__PURE__ */ lazy(() =>
  z
    .strictObject({
      latency: z._default(z.enum(["p50", "p75", "p90", "p95", "p99"]), "p90"),
      target: z.optional(duration()),
      initial: z._default(slots(), 10),
      min: z._default(slots(), 1),
      max: z._default(slots(), 200),
      /** How often the limit is recomputed from what the region's isolates reported. */
      interval: z._default(duration(), 1_000),
      /** How long an in-flight slot is held at most (default: the route's origin_timeout and 5 s more). */
      lease: z.optional(duration()),
      tolerance: z._default(z.number().check(z.minimum(1), z.maximum(10)), 1.5),
      /**
       * The most of an isolate's report one client may account for (beyond 10 samples): its further
       * samples do not count, so one client cannot move everybody's limit. 1: no bound.
       */
      client_share: z._default(z.number().check(z.gt(0), z.maximum(1)), 0.25),
      reserve: z.optional(deferred(reserve)),
    })
    .check(
      z.superRefine((a, ctx) => {
        const issue = (path: string, message: string) => ctx.addIssue({ code: "custom", path: [path], message });
        if (a.min > a.max) issue("min", `${a.min} is above max ${a.max}`);
        if (a.initial < a.min || a.initial > a.max) issue("initial", `must be within min ${a.min} and max ${a.max}`);
        if (a.interval < 100 || a.interval > 60_000) issue("interval", "must be from 100ms to 1m");
        if (a.target !== undefined && a.target < 1) issue("target", "must be at least 1ms");
      }),
    ),
);

/** The name of the concurrency limit an `adaptive` route gets (a route's own limits may not take it). */
export const ADAPTIVE_LIMIT = "adaptive";

/**
 * The concurrency limit an adaptive route is decided with: one bucket per region (`global` key,
 * `region` scope), `initial` slots until the region's Redis holds a learnt figure, which reaches
 * the script as an override of this bucket (src/features/rate-limit/adaptive/).
 */
export function adaptiveLimit(a: z.output<ReturnType<typeof adaptiveSettings>>, originTimeoutMs: number) {
  return limit().parse({
    name: ADAPTIVE_LIMIT,
    key: "global",
    algorithm: "concurrency",
    limit: a.initial,
    lease: `${a.lease ?? originTimeoutMs + 5_000}ms`,
    ...(a.reserve ? { reserve: a.reserve } : {}),
  });
}
