import * as z from "zod/mini";
import { lazy } from "../../config/lazy.js";
import { duration } from "../../config/primitives.js";

export const breakerSettings = /* @__PURE__ */ lazy(() =>
  z.strictObject({
    window: z._default(duration(), 10_000),
    min_requests: z._default(z.int().check(z.minimum(1)), 20),
    /** Opens when at least this share of the window's requests failed (5xx, timeout, network). */
    error_ratio: z._default(z.number().check(z.gt(0), z.maximum(1)), 0.5),
    /** Opens too when the window's median origin latency passes this (ms). */
    latency_ms: z.optional(z.int().check(z.positive())),
    cooldown: z._default(duration(), 10_000),
    /** Requests let through when half-open; all must succeed to close. */
    probes: z._default(z.int().check(z.minimum(1), z.maximum(100)), 3),
    /** Share the open state through Redis so every isolate of the region agrees (docs/shedding.md, Circuit breaker). */
    shared: z._default(z.boolean(), false),
    /**
     * The most of the window one client (IP) may account for, as a share of min_requests: its
     * events beyond max(1, ceil(min_requests × client_share)), oldest first, do not count, so one
     * client cannot open the route's breaker for everybody. 1: no cap.
     */
    client_share: z._default(z.number().check(z.gt(0), z.maximum(1)), 0.25),
  }),
);
