/**
 * `sluice/limiter`: the rate limits called from the app's own code, for work that is not a request
 * of the app (a queue consumer, a cron job, a WebSocket message, a Durable Object) or a key only
 * the handler knows. Same script, same one round trip, same leases and outage policy as `rateLimit()`.
 *
 * @example
 * import { limiter } from "sluice/limiter";
 * const jobs = limiter({ name: "jobs", limits: [{ name: "per-user", rate: 10, period: "1m" }] });
 * const { success, retryAfterMs } = await jobs.limit(c, userId);
 */
import type { Context } from "hono";
import { ConfigError, type Config } from "../config/load.js";
import type { Limit } from "../config/index.js";
import { plainConfigSchema } from "../config/settings.js";
import type { Env } from "../env.js";
import { CODE_PART } from "../identity/identify.js";
import type { Defer } from "../util/defer.js";
import { deferrer } from "../pipeline/scope.js";
import { redisNotConfigured } from "../pipeline/redis-required.js";
import { chooseRegion } from "../region/index.js";
import { isolateRuntime } from "../runtime.js";
import { isMisconfigured, type StoreError } from "../store/deadline.js";
import type { RedisConnection } from "../store/redis.js";
import { decideLimits } from "../features/rate-limit/core.js";
import { rateLimitIsolate } from "../features/rate-limit/isolate/rate-limit-isolate.js";
import { hasTrait } from "../features/rate-limit/algorithms/registry.js";
import type { Decision } from "../features/rate-limit/types.js";
import type { LimitOptions } from "./rate-limit.js";
import { compileOptions, connectionOf, recordServed, type SharedOptions } from "./standalone.js";

/** Where a call runs: a Hono context, or a Worker's `env` and `ExecutionContext` (queue, cron, Durable Object). */
export type LimiterContext = Context | { env?: unknown; executionCtx?: { waitUntil(work: Promise<unknown>): void } };

export interface LimiterOptions extends Omit<SharedOptions, "redis"> {
  /** The limits every call is decided against, all or nothing; their key is the call's identifier. */
  limits: ReadonlyArray<Omit<LimitOptions, "key" | "missing">>;
  /** Names the buckets in Redis (`{key_prefix}:{name}:{limit}:{hash}`); default "limiter". */
  name?: string;
  /** The Redis, or a function of the call's context giving one; default: `env`'s `UPSTASH_REDIS_REST_URL` / `_TOKEN`. */
  redis?: RedisConnection | ((c: LimiterContext) => RedisConnection);
}

/** What a call decided, shaped like `@upstash/ratelimit`'s answer. */
export interface LimiterResult {
  success: boolean;
  /** The binding limit's capacity (its burst: the most a full bucket holds). */
  limit: number;
  /** Whole tokens left in the binding limit's bucket (after this call's charge, when admitted). */
  remaining: number;
  /**
   * When the binding limit's bucket is full again, as epoch milliseconds: `@upstash/ratelimit`'s
   * `reset`, kept for code moving from it. The same instant as `resetAt`; `resetMs` is the wait.
   */
  reset: number;
  /** Milliseconds from now until the binding limit's bucket is full again (as in `c.get("sluice")`'s limits). */
  resetMs: number;
  /** When the binding limit's bucket is full again, as epoch milliseconds (as in `c.get("sluice")`'s limits). */
  resetAt: number;
  /** When refused: milliseconds until the call could pass (-1: never, its cost exceeds the capacity); 0 when admitted. */
  retryAfterMs: number;
  /** Redis did not answer: under `on_store_error = "open"` nothing was decided; under `local` this isolate decided alone. */
  degraded?: boolean;
}

export interface Limiter {
  /**
   * Spends `cost` (default each limit's own) from the identifier's buckets, all or nothing. Throws a
   * `ConfigError` naming the variable when no Redis is configured (no `redis` option and no
   * `UPSTASH_REDIS_REST_URL` / `_TOKEN` in `env`; the home region's is needed too, as on the
   * gateway), when the database refuses the token (HTTP 401/403) or when the URL cannot be a REST
   * endpoint (`rediss://…`, no scheme): a misconfiguration, not an outage.
   */
  limit(c: LimiterContext, identifier: string, options?: { cost?: number }): Promise<LimiterResult>;
  /** The identifier's buckets as they stand, nothing spent; throws the same `ConfigError` as `limit` without Redis. */
  peek(c: LimiterContext, identifier: string): Promise<LimiterResult>;
}

/**
 * A limiter the app calls itself: each call decides every limit for `identifier` (hashed before it
 * reaches Redis, like every identifier) in one Redis call. A bad option throws a `ConfigError` now.
 */
export function limiter(options: LimiterOptions): Limiter {
  const { name = "limiter", limits } = options;
  const config = compileOptions("limiter", options, { name, limits }, { schema: plainConfigSchema });
  const compiled = config.routes[0];
  if (!compiled) throw new Error("limiter(): the options compiled to no route");
  compiled.limits.forEach(callable);
  // every limit is keyed on the call's identifier, given as the key part from the app's code
  const route = {
    ...compiled,
    limits: compiled.limits.map((l) => ({ ...l, key: [CODE_PART], missing: "reject" as const })),
  };
  recordServed(config, options, { by: "limiter()", duties: ["limits"] }, [route]);
  const run = async (c: LimiterContext, identifier: string, peek: boolean, cost?: number) => {
    if (typeof identifier !== "string" || identifier === "")
      throw new TypeError("limiter(): the identifier must be a non-empty string");
    if (cost !== undefined && !(Number.isInteger(cost) && cost > 0))
      throw new TypeError("limiter(): cost must be a positive whole number");
    const call = callPlace(config, options, c);
    // missing configuration is no outage: never a quiet per-isolate decision (`on_store_error` is for outages)
    const unconfigured = redisNotConfigured({ ...call, route });
    if (unconfigured && options.redis !== undefined)
      throw new ConfigError("limiter(): redis", "the function given as `redis` returned no connection");
    if (unconfigured) throw new ConfigError(`env.${String(unconfigured.extensions?.missing)}`, unconfigured.detail);
    const ask = { route, caller: { identifier, cost }, mode: peek ? "peek" : "take" } as const;
    const decided = await decideLimits(call.place, ask).catch((e: unknown) => {
      throw isMisconfigured(e) ? misconfigured(e, options.redis !== undefined) : e;
    });
    return decided
      ? { ...resultOf(decided.decision), ...(decided.degraded ? { degraded: true } : {}) }
      : degradedResult();
  };
  return {
    limit: (c, identifier, opts) => run(c, identifier, false, opts?.cost),
    peek: (c, identifier) => run(c, identifier, true),
  };
}

/** Where one call is decided: the caller's region (from the request, when there is one), its databases, the isolate. */
function callPlace(config: Config, options: LimiterOptions, c: LimiterContext) {
  const runtime = options.runtime ?? isolateRuntime();
  const env = (c.env ?? {}) as Env;
  const cf = "req" in c ? (c.req.raw.cf as { colo?: string; continent?: string } | undefined) : undefined;
  const region = chooseRegion(config, cf);
  const stores = runtime.stores(connectionOf(options, c, config), config);
  const defer: Defer = "req" in c ? deferrer(c) : (work) => c.executionCtx?.waitUntil(work);
  const isolate = rateLimitIsolate(runtime);
  return { runtime, env, config, region, stores, place: { config, region, stores, defer, isolate } };
}

/**
 * A limit a call can be decided against: a concurrency slot or a cost from a response would need
 * the end of a request to settle, which a call does not have.
 */
function callable(limit: Limit, index: number): void {
  const named = (field: string) => `limiter(): limits[${index}] (${JSON.stringify(limit.name)}).${field}`;
  if (hasTrait(limit.algorithm, "inFlight"))
    throw new ConfigError(
      `limiter(): limits[${index}].algorithm`,
      "concurrency needs a request to end: use rateLimit()",
      named("algorithm"),
    );
  if (limit.responseCost)
    throw new ConfigError(
      `limiter(): limits[${index}].cost`,
      "a cost from the response needs a response: use rateLimit()",
      named("cost"),
    );
}

/**
 * A store the deployment misconfigured (its token refused, its URL not REST) is a `ConfigError`
 * naming the setting, as a missing one is: never an outage's degraded answer.
 */
function misconfigured(e: StoreError, given: boolean): ConfigError {
  const variable = e.variable ?? "redis";
  return new ConfigError(given ? `limiter(): ${variable}` : `env.${variable}`, e.message);
}

/** Redis did not answer and the deployment fails open: admitted, nothing decided. */
function degradedResult(): LimiterResult {
  return { ...resetIn(0, Date.now()), success: true, limit: 0, remaining: 0, retryAfterMs: 0, degraded: true };
}

/** The answer: the binding limit's figures (a refusal's blocking limit, else the one with the fewest calls left). */
function resultOf(decision: Decision): LimiterResult {
  const now = Date.now();
  const enforced = decision.outcomes.filter((o) => !o.limit.shadow);
  const binding =
    decision.verdict === "reject"
      ? decision.blocking
      : enforced.reduce<(typeof enforced)[number] | undefined>(
          (a, b) => (a === undefined || b.remaining / b.cost < a.remaining / a.cost ? b : a),
          undefined,
        );
  if (!binding) return { ...resetIn(0, now), success: true, limit: 0, remaining: 0, retryAfterMs: 0 };
  return {
    ...resetIn(binding.resetMs, now),
    success: decision.verdict !== "reject",
    limit: binding.limit.burst,
    remaining: Math.max(0, binding.remaining),
    retryAfterMs: decision.verdict === "reject" ? binding.retryAfterMs : 0,
  };
}

/** The three spellings of when a bucket is full again: the wait in ms, and the instant (twice: `reset` is `@upstash/ratelimit`'s name). */
function resetIn(ms: number, now: number): Pick<LimiterResult, "reset" | "resetMs" | "resetAt"> {
  const resetMs = Math.max(0, ms);
  return { reset: now + resetMs, resetMs, resetAt: now + resetMs };
}
