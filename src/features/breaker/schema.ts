import { z } from "zod";
import { duration } from "../../config/primitives.js";

export const breakerSettings = z
  .object({
    window: duration.default(10_000),
    min_requests: z.number().int().min(1).default(20),
    /** Opens when at least this share of the window's requests failed (5xx, timeout, network). */
    error_ratio: z.number().gt(0).max(1).default(0.5),
    /** Opens too when the window's median origin latency passes this (ms). */
    latency_ms: z.number().int().positive().optional(),
    cooldown: duration.default(10_000),
    /** Requests let through when half-open; all must succeed to close. */
    probes: z.number().int().min(1).max(100).default(3),
    /** Share the open state through Redis so every isolate of the region agrees (docs/shedding.md, Circuit breaker). */
    shared: z.boolean().default(false),
    /**
     * The most of the window one client (IP) may account for, as a share of min_requests: its
     * events beyond max(1, ceil(min_requests × client_share)), oldest first, do not count, so one
     * client cannot open the route's breaker for everybody. 1: no cap.
     */
    client_share: z.number().gt(0).max(1).default(0.25),
  })
  .strict();
