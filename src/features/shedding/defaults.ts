import * as z from "zod/mini";

// What a route that sets no shedding option gets, apart from the options' schemas (./schema.ts):
// every route has these fields, a middleware's (`rateLimit()`, `limiter()`, the lists) included,
// whose options set none of them, so a Worker that uses such a middleware alone carries this file
// and not the schemas of the fallback page, the divert and the queue.

/** What a refused request gets instead of a 429 (`on_limit`, docs/shedding.md). */
export const ON_LIMIT = ["reject", "fallback", "queue", "divert"] as const;

/** Whether a response to a request with a cookie may be kept as a fallback copy (`fallback_cookies`). */
export const FALLBACK_COOKIES = ["private", "shared"] as const;

/** The defaults of the shedding options (the queue's: `queueDefaults()`). */
export const SHEDDING_DEFAULTS = {
  on_limit: "reject",
  divert_timeout: 10_000,
  fallback_ttl: 300_000,
  fallback_cookies: "private",
} as const;

/**
 * What sends a route's requests to its `divert_url`: a refusal by its limits (`on_limit = "divert"`),
 * its open breaker, or the origin failing it (a 5xx or no connection; no answer within `origin_timeout`).
 */
export const DIVERT_REASONS = ["limit", "breaker", "5xx", "timeout"] as const;
export type DivertReason = (typeof DIVERT_REASONS)[number];

/** When a route diverts: the reasons it names (`["limit"]` by default), none without a `divert_url`. */
export function divertReasons(r: { divert_url?: string; divert_on?: DivertReason[] }): DivertReason[] {
  return r.divert_url === undefined ? [] : (r.divert_on ?? ["limit"]);
}

/** A route's queue, as its schema (./schema.ts `queueSettings`) gives it. */
export interface QueueSettings {
  max_body: number;
  headers: string[];
  max_depth?: number;
  max_per_client?: number;
  max_age?: number;
  status_ttl: number;
  callbacks: Array<{ url: string; prefix: boolean }>;
  max_retries: number;
  retry_delays: number[];
}

export const DEFAULT_MAX_RETRIES = 3;

/** The schedule without `retry_delays`: 1 s, 2 s, 4 s … doubling, at most 60 s. */
export function backoff(retries: number): number[] {
  return Array.from({ length: retries }, (_, i) => Math.min(60_000, 1_000 * 2 ** i));
}

/**
 * A route's queue when it sets none: what `queueSettings().parse({})` gives (a unit test holds
 * them equal), written out so that a route without a queue builds no queue schema.
 */
export function queueDefaults(): QueueSettings {
  const retry_delays = backoff(DEFAULT_MAX_RETRIES);
  return {
    max_body: 64 * 1024,
    headers: ["content-type"],
    status_ttl: 86_400_000,
    callbacks: [],
    max_retries: retry_delays.length,
    retry_delays,
  };
}

/** A field no options can set: absent, it is `value`; given, it is refused. */
const unsettable = <T extends NonNullable<unknown>>(value: T | (() => T)) =>
  z._default(
    z.custom<T>(() => false),
    value,
  );

/**
 * The shedding options of a route whose middleware has none: each what `sheddingOptions()`
 * (./schema.ts) gives a route that leaves it out, in its place, so the route is the gateway's to
 * the order of its keys (a unit test holds the two equal).
 */
export const sheddingDefaults = () => ({
  on_limit: unsettable<(typeof ON_LIMIT)[number]>(SHEDDING_DEFAULTS.on_limit),
  divert_timeout: unsettable<number>(SHEDDING_DEFAULTS.divert_timeout),
  fallback_ttl: unsettable<number>(SHEDDING_DEFAULTS.fallback_ttl),
  fallback_cookies: unsettable<(typeof FALLBACK_COOKIES)[number]>(SHEDDING_DEFAULTS.fallback_cookies),
  queue: unsettable<QueueSettings>(queueDefaults),
});
