/*
 * The rate limiter's core: every limit that applies to a caller, decided in one call, with the
 * deployment's outage policy (`on_store_error`), the isolate's leases and blocked-bucket cache
 * inside (`decide()`, decision/decision.ts). Plain inputs and outputs, no Hono, no request
 * scope: the gateway's step, `limiter()`, the queue's consumer and the MCP gateway call it alike.
 */
import type { Config, Limit, Route } from "../../config/index.js";
import { identifierFacts, type IdentityFacts } from "../../identity/identify.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import type { Stores } from "../../region/index.js";
import { isMisconfigured, StoreError } from "../../store/deadline.js";
import type { Defer } from "../../util/defer.js";
import { logError } from "../../util/log.js";
import { BadLimitInput, bucketsFor, keyedBuckets } from "./decision/buckets.js";
import { decide, madeWithoutRedis, type IsolateState } from "./decision/decision.js";
import type { LocalBuckets } from "./isolate/local.js";
import type { Bucket, Decision } from "./types.js";

/** Where a decision is made: the deployment, the caller's region and its databases, the isolate's parts. */
export interface DecisionPlace {
  config: Config;
  region: string;
  stores: Stores;
  /**
   * The isolate's blocked buckets, leases and overrides' copy; and its own buckets for
   * `on_store_error = "local"` (a caller without them has a store's failure thrown, as `onStoreError: "throw"`).
   */
  isolate: IsolateState & { localBuckets?: LocalBuckets };
  defer: Defer;
}

/** Who is decided: a request's facts, or a caller that names itself by an identifier (and a cost). */
export type Caller = { facts: IdentityFacts } | { identifier: string; cost?: number };

/** What to decide: whose buckets, under which route's limits (all, or those `applies` keeps), spent or only read. */
export interface DecisionAsk {
  route: Route;
  caller: Caller;
  mode: "take" | "peek";
  /** Which of the route's limits apply to this call (default: all); a tool's name may narrow them. */
  applies?: (limit: Limit) => boolean;
  /** A Redis that does not answer: as `on_store_error` says (default), or thrown (the queue tries the job again later). */
  onStoreError?: "policy" | "throw";
  /** The route the caller came by, for the log (a peek route is decided under the route it names); default `route`'s. */
  cameBy?: string;
}

/** The rate limiter's decision, kept for what runs after the response. */
export interface LimitRun {
  decision: Decision;
  buckets: Bucket[];
  /** Decided without Redis's answer (Redis failed; `open` or `local`). */
  degraded: boolean;
  peek: boolean;
  delayMs: number;
  /** The central call's round trip, when Redis was asked. */
  rttMs?: number;
}

/**
 * Decides every limit of `ask.route` that applies, for the caller: the decision, or `undefined`
 * when Redis failed and the deployment fails open. Redis failing under `on_store_error = "local"`
 * is decided by this isolate alone; under `closed` it is a 503 problem. A misconfigured store's
 * `StoreError` is thrown as it is, whatever `on_store_error` says; a missing identity or a bad cost
 * is a 400 problem.
 *
 * @example
 * const run = await decideLimits(place, { route, caller: { identifier: "user-7", cost: 2 }, mode: "take" });
 * if (run?.decision.verdict === "reject") console.log(run.decision.blocking.retryAfterMs);
 */
export async function decideLimits(place: DecisionPlace, ask: DecisionAsk): Promise<LimitRun | undefined> {
  const { config, region, stores, isolate } = place;
  const route = ask.applies ? { ...ask.route, limits: ask.route.limits.filter(ask.applies) } : ask.route;
  const facts = factsOf(ask.caller);
  const peek = ask.mode === "peek";
  let buckets: Bucket[] = [];
  try {
    buckets = await bucketsFor(route, facts, config, {
      region,
      regional: stores.decision(region),
      home: stores.home(),
    });
    const started = Date.now();
    const decision = await decide(buckets, isolate, started, place.defer, ask.mode);
    const rttMs = madeWithoutRedis(decision) ? undefined : Date.now() - started;
    return { decision, buckets, degraded: false, peek, delayMs: delayOf(decision, peek), rttMs };
  } catch (e) {
    if (e instanceof BadLimitInput)
      throw new Problem({ type: PROBLEMS.badRequestForLimit, detail: e.message, extensions: { limit: e.limit } });
    // a misconfigured store (a token refused, a URL that is not REST) is no outage: it is answered
    // loudly where the request is answered (src/pipeline/redis-required.ts), never by on_store_error
    if (!(e instanceof StoreError) || isMisconfigured(e) || ask.onStoreError === "throw" || !isolate.localBuckets)
      throw e;
    storeTrouble(e, config, region, ask.cameBy ?? route.name);
    if (config.on_store_error !== "local") return undefined;
    // idempotency and sessions still apply: only the limits are decided here, by this isolate
    const keyed = buckets.length > 0 ? buckets : await keyedBuckets(route, facts, config, region);
    const decision = isolate.localBuckets.decide(keyed, Date.now(), ask.mode);
    return { decision, buckets, degraded: true, peek, delayMs: delayOf(decision, peek) };
  }
}

function factsOf(caller: Caller): IdentityFacts {
  return "facts" in caller ? caller.facts : identifierFacts(caller.identifier, caller.cost);
}

function delayOf(decision: Decision, peek: boolean): number {
  return peek ? 0 : Math.max(0, ...decision.outcomes.map((o) => o.delayMs));
}

/** Logs a store failure; under `on_store_error = "closed"` it is the 503 the client gets. */
function storeTrouble(e: StoreError, config: Config, region: string, route: string): void {
  logError("store_error", e, { reason: e.reason, region, route, on_store_error: config.on_store_error });
  if (config.on_store_error !== "closed") return;
  throw new Problem({
    type: PROBLEMS.rateLimiterUnavailable,
    detail: `the rate limit store did not answer (${e.reason}) and this deployment fails closed`,
    headers: { "Retry-After": "1" },
  });
}
