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

// ---------------------------------------------------------------------------------------------
// Section 11, origin protection: one route per case, each in front of the queueing origin.

type RouteInput = NonNullable<SluiceInput["routes"]>[number];

/**
 * The adaptive limit (a route setting another change brings): `target` absent = learned. Typed
 * here, not taken from the schema, so the bench compiles before and after the feature lands.
 */
export interface AdaptiveInput {
  latency: "p50" | "p90" | "p99";
  target?: string;
  initial: number;
  min: number;
  max: number;
  interval: string;
}

export const PROTECT_PATH = "/protect";

/** The route of a fixed in-flight cap of `limit` at the origin (`null`: no limit at all). */
export function protectRoute(limit: number | null): RouteInput {
  const name = limit === null ? "none" : `fixed-${limit}`;
  return {
    name,
    match: `${PROTECT_PATH}/${name}/*`,
    limits: limit === null ? [] : [{ name: "origin", key: "global", algorithm: "concurrency", limit, lease: "30s" }],
  };
}

/** The route of an adaptive limit, named `name`. */
export function adaptiveRoute(name: string, adaptive: AdaptiveInput): RouteInput {
  const route: RouteInput & { adaptive: AdaptiveInput } = { name, match: `${PROTECT_PATH}/${name}/*`, adaptive };
  return route;
}

/** A gateway with these routes, the same budget as the other sections (nothing `degraded` by a slow moment). */
export function protectConfig(routes: RouteInput[]): SluiceInput {
  return { key_prefix: "bench-protect", timeout_ms: TIMEOUT_MS, routes };
}

/** The adaptive cases: learned (no target), and a p90 target of 250 ms. */
export const ADAPTIVE_CASES: Array<{ key: string; label: string; adaptive: AdaptiveInput }> = [
  {
    key: "adaptive-learned",
    label: "adaptive, p90 learned (no target)",
    adaptive: { latency: "p90", initial: 10, min: 1, max: 200, interval: "1s" },
  },
  {
    key: "adaptive-target",
    label: "adaptive, p90 target 250 ms",
    adaptive: { latency: "p90", target: "250ms", initial: 10, min: 1, max: 200, interval: "1s" },
  },
];
