/**
 * The sluice configurations the bench runs. Limits are huge (a million per second) so that
 * every request is allowed: the figures are the cost of deciding, not of refusing.
 */
import type { SluiceInput } from "../src/config/schema.js";

/** One limit as written in the configuration (before sluice compiles it). */
export type LimitInput = NonNullable<NonNullable<SluiceInput["routes"]>[number]["limits"]>[number];

const HUGE = { rate: 1_000_000, period: "1s" } as const;

/**
 * A generous Redis budget: on a loaded 2-core machine the default 50 ms can expire and turn a
 * decision into "degraded" (allowed without Redis), which would measure the timeout, not the
 * decision. Any such outcome is still counted and reported.
 */
const TIMEOUT_MS = 1_000;

export const PATH_ONE = "/bench/one/item";
export const PATH_FOUR = "/bench/four/item";
export const PATH_ALGORITHMS = "/bench/algorithms/item";
export const PATH_UNLIMITED = "/bench/one/item";

/** Limiting on: a route with one token bucket, a route with four, and a route with one limit of each algorithm. */
export const LIMITED: SluiceInput = {
  key_prefix: "bench",
  timeout_ms: TIMEOUT_MS,
  on_store_error: "open",
  routes: [
    {
      name: "one",
      match: "/bench/one/*",
      limits: [{ name: "per-ip", key: "ip", ...HUGE }],
    },
    {
      name: "four",
      match: "/bench/four/*",
      limits: [
        { name: "per-ip", key: "ip", ...HUGE },
        { name: "site", key: "global", ...HUGE },
        { name: "per-path", key: "path", ...HUGE },
        { name: "per-ip-path", key: ["ip", "path"], ...HUGE },
      ],
    },
    {
      // Four algorithms in one route: still one EVALSHA. Leaky with nodelay, so nothing waits.
      name: "algorithms",
      match: "/bench/algorithms/*",
      limits: [
        { name: "per-ip", key: "ip", algorithm: "token_bucket", ...HUGE },
        { name: "site", key: "global", algorithm: "leaky_bucket", nodelay: true, ...HUGE },
        { name: "per-path", key: "path", algorithm: "fixed_window", ...HUGE },
        { name: "per-ip-path", key: ["ip", "path"], algorithm: "sliding_window", ...HUGE },
      ],
    },
  ],
};

/** Limiting off: the same bundle and bindings, no routes, so every path is forwarded as is. */
export const UNLIMITED: SluiceInput = {
  key_prefix: "bench",
  timeout_ms: TIMEOUT_MS,
  on_store_error: "open",
  routes: [],
};
