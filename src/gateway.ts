import { loadConfig, type Config, type ConfigResult, type Route } from "./config/index.js";
import type { Env } from "./env.js";
import { clientIp, type RequestFacts } from "./keys/identify.js";
import { BlockedBuckets } from "./limiter/blocked.js";
import { BadLimitInput, bucketsFor, keyedBuckets } from "./limiter/buckets.js";
import { usesJwt, verifyBearer } from "./keys/jwt.js";
import { decide, giveBack, madeWithoutRedis, type Bucket, type Defer } from "./limiter/decide.js";
import { rateLimitHeaders, retryAfterSeconds } from "./limiter/headers.js";
import { LeaseBroker } from "./limiter/lease-broker.js";
import { LocalBuckets } from "./limiter/local.js";
import type { Decision } from "./limiter/types.js";
import { forward, originFailed, originRequest, sendToOrigin, type ForwardTarget, type OriginReply } from "./origin/forward.js";
import { claimSideEffect } from "./side-effect.js";
import { chooseRegion, homeStore, regionStore } from "./region/index.js";
import { nudgeRebalance } from "./region/rebalance.js";
import { normalisePath } from "./routing/normalise.js";
import { findRoute } from "./routing/route.js";
import { breakerFor, recordOutcome } from "./shed/breakers.js";
import { findCopy, isKeepable, keepCopy, type CopyAddress } from "./shed/fallback.js";
import { JOBS_PATH } from "./shed/queue.js";
import { enqueue, jobStatusResponse } from "./shed/enqueue.js";
import { problem, type DecisionHeader } from "./shed/problem.js";
import { listVerdict } from "./access/lists.js";
import { count, maybeFlush } from "./metrics/index.js";
import { StoreError } from "./store/deadline.js";

/** Isolate-wide state: survives between requests of one isolate, never shared between isolates. */
export const blocked = new BlockedBuckets(10_000);
/** The buckets this isolate enforces on its own while Redis fails (`on_store_error = "local"`). */
export const localBuckets = new LocalBuckets(10_000);
/** Tokens Redis has debited for this isolate, spent here without a round trip (README, Leases). */
export const leases = new LeaseBroker(10_000);
let memo: { sluice: unknown; origin: unknown; queue: boolean; result: ConfigResult } | undefined;

/** Everything the steps of one request share. */
export interface Exchange {
  request: Request;
  env: Env;
  config: Config;
  region: string;
  route: Route;
  facts: RequestFacts;
  target: ForwardTarget;
  copy: CopyAddress;
  defer: Defer;
  /** Filled in as the request goes: what its decision is counted and logged under. */
  meta: DecisionMeta;
}

/**
 * The request path of sluice, in one direction: configuration → normalise path → match route →
 * deny/allow lists → breaker → derive buckets → one Redis call decides every limit → idempotency
 * → forward, or shed (429, cached copy, queue) → headers, metrics.
 */
export async function gate(request: Request, env: Env, defer: Defer): Promise<Response> {
  const loaded = configOf(env);
  if (!loaded.ok) {
    const { field, problem: what } = loaded.error;
    return stamp(problem({ status: 500, title: "Invalid sluice configuration", detail: loaded.error.message, extensions: { field, problem: what } }), "reject", "unknown");
  }
  const config = loaded.config;
  const region = chooseRegion(config, request.cf as { colo?: string; continent?: string } | undefined);
  const url = new URL(request.url);
  const normal = normalisePath(url.pathname, config.paths);
  if (!normal.ok) return stamp(problem({ status: normal.status, title: "Bad request path", detail: normal.detail }), "reject", region);
  if (normal.path.match.startsWith(JOBS_PATH) && request.method === "GET") {
    return stamp(await jobStatusResponse(env, config, normal.path.match.slice(JOBS_PATH.length)), "allow", region);
  }

  const ip = clientIp(request.headers);
  const route = findRoute(config.routes, request.method, normal.path.match);
  const target: ForwardTarget = { origin: config.originUrl, path: normal.path.forward, clientIp: ip, timeoutMs: route?.origin_timeout };
  const facts: RequestFacts = { ip, matchPath: normal.path.match, headers: request.headers, url };
  const listed = await listVerdict(config, env, facts, route?.name, defer);
  if (listed === "deny") return stamp(problem({ status: 403, title: "Forbidden", detail: "this client is on the deny list" }), "reject", region, { route: route?.name ?? "-", limit: "deny-list" });
  if (!route) return stamp(await forward(request, target), "allow", region);

  const x: Exchange = { request, env, config, region, route, facts, target, copy: { host: url.host, route: route.name, path: normal.path.forward, search: url.search }, defer, meta: { route: route.name, limit: "-" } };
  const res = await serve(x, listed === "allow");
  maybeFlush(config, env, defer);
  return res;
}

/** A matched route: breaker, limits, idempotency, origin. */
async function serve(x: Exchange, allowListed: boolean): Promise<Response> {
  const { request, env, config, region, route, facts, defer } = x;
  // a peek route reads the buckets of the route it names (or its own) without spending
  const limited = typeof route.peek === "string" ? (config.routes.find((r) => r.name === route.peek) as Route) : route;
  const peek = route.peek !== false;
  if (usesJwt(limited) && !allowListed) {
    const verified = await verifyBearer(request, config.jwt, env);
    if (!verified.ok) return done(x, problem({ status: 401, title: "Invalid token", detail: verified.detail, headers: { "WWW-Authenticate": 'Bearer error="invalid_token"' } }), "reject");
    facts.claims = verified.claims;
  }
  const breaker = breakerFor(x);
  const admission = breaker?.admit(Date.now());
  if (admission && !admission.pass) return breakerOpen(x, admission.retryAfterMs);

  let decision: Decision | undefined;
  let buckets: Bucket[] = [];
  let delay = 0;
  let degraded = false;
  if (limited.limits.length > 0 && !allowListed) {
    const stores = { region, regional: regionStore(env, config, region), home: homeStore(env, config, region) };
    try {
      buckets = await bucketsFor(limited, facts, config, stores);
      const started = Date.now();
      decision = await decide(buckets, { blocked, leases }, started, defer, peek ? "peek" : "take");
      if (!madeWithoutRedis(decision)) x.meta.rttMs = Date.now() - started;
    } catch (e) {
      if (e instanceof BadLimitInput) return done(x, problem({ status: 400, title: "Bad request for limit", detail: e.message, extensions: { limit: e.limit } }), "reject");
      if (!(e instanceof StoreError)) throw e;
      const closed = storeTrouble(e, x);
      if (closed) return closed;
      // open: the request goes on without its limits; local: this isolate enforces them itself
      // (idempotency and sessions still apply either way)
      degraded = true;
      if (config.on_store_error === "local") {
        const keyed = buckets.length > 0 ? buckets : await keyedBuckets(limited, facts, config, region);
        decision = localBuckets.decide(keyed, Date.now(), peek ? "peek" : "take");
      }
    }
  }
  if (decision) {
    if (!degraded && limited.limits.some((l) => l.scope === "split")) nudgeRebalance(config, env, Date.now(), defer);
    if (decision.verdict === "reject" && !peek) return shed(x, decision);
    if (decision.verdict === "shadow") x.meta.limit = decision.outcomes.find((o) => !o.allowed)?.limit.name ?? "-";
    // leaky buckets hand out slots: the request waits for its own before it goes
    delay = peek ? 0 : Math.max(0, ...decision.outcomes.map((o) => o.delayMs));
    if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
  }
  // rate limits ran first; now one side effect per key, then one call per session at a time
  const effect = await claimSideEffect(x);
  if (effect.kind === "answer") {
    // a local decision charged nothing in Redis, so there is nothing there to give back
    if (effect.decision === "replay" && decision && !degraded) defer(giveBack(buckets, decision, leases).catch(() => undefined));
    return done(x, effect.response, effect.decision);
  }
  const forwarded: Exchange = { ...x, request: effect.request, target: { ...x.target, sluiceHeaders: effect.sluiceHeaders } };
  let res: Response;
  try {
    res = await effect.settle(await forwardWatched(forwarded, admission?.pass ? admission.probe : false));
  } finally {
    await effect.release();
  }
  const verdict = degraded ? "degraded" : !decision || peek ? "allow" : decision.verdict === "reject" ? "allow" : decision.verdict;
  const extra: Record<string, string> = decision ? rateLimitHeaders(decision.outcomes) : {};
  if (delay > 0) extra["Sluice-Delay-Ms"] = String(delay);
  return done(x, withHeaders(res, extra), verdict);
}

/** Stamps a route's response and counts it (and logs it when it was not a plain allow). */
function done(x: Exchange, res: Response, decision: DecisionHeader): Response {
  return stamp(res, decision, x.region, x.meta);
}

/** Forwards, tells the breaker how it went, and keeps a copy for fallback routes. */
async function forwardWatched(x: Exchange, probe: boolean): Promise<OriginReply> {
  const started = Date.now();
  const reply = await sendToOrigin(x.request, x.target);
  recordOutcome(x, !originFailed(reply), Date.now() - started, probe);
  const res = reply.response;
  if (x.route.on_limit === "fallback" && reply.outcome === "answered" && isKeepable(x.request, res, x.route.fallback_cookies)) {
    x.defer(keepCopy(x.copy, reply.sent, res.clone(), x.route.fallback_ttl).catch(() => undefined));
  }
  return reply;
}

/** A refused request, as the route's `on_limit` says: 429, the last good copy, or the queue. */
async function shed(x: Exchange, d: Extract<Decision, { verdict: "reject" }>): Promise<Response> {
  x.meta.limit = d.blocking.limit.name;
  x.meta.blockedId = d.blocking.key.slice(d.blocking.key.lastIndexOf(":") + 1);
  if (x.route.on_limit === "queue") {
    const queued = await enqueue(x, d.blocking.retryAfterMs);
    return done(x, queued.response, queued.decision);
  }
  if (x.route.on_limit === "fallback") {
    const fallback = await fallbackFor(x);
    if (fallback) return done(x, withHeaders(fallback, rateLimitHeaders([d.blocking])), "fallback");
  }
  return done(x, tooManyRequests(d, x.route.name), "reject");
}

/** The breaker is open: the origin gets nothing; the client gets a copy, the static page, or a 503. */
async function breakerOpen(x: Exchange, retryAfterMs: number): Promise<Response> {
  x.meta.limit = "breaker";
  const fallback = await fallbackFor(x);
  if (fallback) return done(x, fallback, "fallback");
  return done(
    x,
    problem({
      status: 503,
      title: "Origin unavailable",
      detail: `the origin of route "${x.route.name}" is failing; sluice is giving it ${retryAfterMs} ms to recover`,
      extensions: { retry_after_ms: retryAfterMs },
      headers: { "Retry-After": String(retryAfterSeconds(retryAfterMs)) },
    }),
    "reject",
  );
}

/** The cached copy (GET/HEAD of fallback routes), else the route's static fallback, else nothing. */
async function fallbackFor(x: Exchange): Promise<Response | undefined> {
  const method = x.request.method;
  if (x.route.on_limit === "fallback" && (method === "GET" || method === "HEAD")) {
    const copy = await findCopy(x.copy, originRequest(x.request, x.target).headers, method).catch(() => undefined);
    if (copy) return copy;
  }
  const s = x.route.fallback;
  if (!s) return undefined;
  return new Response(method === "HEAD" ? null : s.body, { status: s.status, headers: { "content-type": s.content_type, "cache-control": "no-store" } });
}

function tooManyRequests(d: Extract<Decision, { verdict: "reject" }>, route: string): Response {
  const { limit, retryAfterMs } = d.blocking;
  return problem({
    status: 429,
    title: "Too many requests",
    detail: `limit "${limit.name}" of route "${route}" allows ${limit.rate} per ${limit.period} ms (burst ${limit.burst}); retry in ${retryAfterMs} ms`,
    extensions: { limit: limit.name, retry_after_ms: retryAfterMs },
    headers: { "Retry-After": String(retryAfterSeconds(retryAfterMs)), ...rateLimitHeaders([d.blocking]) },
  });
}

/** Logs a store failure; under `on_store_error = "closed"` it is the 503 the client gets, under "open" and "local" nothing. */
function storeTrouble(e: StoreError, x: Exchange): Response | undefined {
  const { config, region, route } = x;
  console.error(JSON.stringify({ event: "store_error", reason: e.reason, region, route: route.name, on_store_error: config.on_store_error, message: e.message }));
  if (config.on_store_error !== "closed") return undefined;
  return done(
    x,
    problem({
      status: 503,
      title: "Rate limiter unavailable",
      detail: `the rate limit store did not answer (${e.reason}) and this deployment fails closed`,
      headers: { "Retry-After": "1" },
    }),
    "reject",
  );
}

/** The configuration of this isolate's environment, validated once and kept. */
export function configOf(env: Env): ConfigResult {
  const queue = Boolean(env.SLUICE_QUEUE);
  if (!memo || memo.sluice !== env.SLUICE || memo.origin !== env.ORIGIN_URL || memo.queue !== queue) {
    const secrets = env as unknown as Record<string, unknown>;
    memo = {
      sluice: env.SLUICE,
      origin: env.ORIGIN_URL,
      queue,
      result: loadConfig({ ORIGIN_URL: env.ORIGIN_URL, SLUICE: env.SLUICE, hasQueue: queue, hasSecret: (name) => typeof secrets[name] === "string" && secrets[name] !== "" }),
    };
  }
  return memo.result;
}

export function withHeaders(res: Response, headers: Record<string, string>): Response {
  for (const [k, v] of Object.entries(headers)) res.headers.set(k, v);
  return res;
}

/** What a route's decision is counted and logged under. */
export interface DecisionMeta {
  route: string;
  /** The limit that decided (refused, or would have in shadow mode), or "-". */
  limit: string;
  /** The hashed identifier of the refused bucket. */
  blockedId?: string;
  rttMs?: number;
}

/**
 * Sets `Sluice-Decision` and `Sluice-Region`. With `meta` (a matched route), also counts the
 * decision for the metrics and writes one structured log line for every decision but `allow`.
 */
export function stamp(res: Response, decision: DecisionHeader, region: string, meta?: DecisionMeta): Response {
  if (meta) {
    count(meta.route, meta.limit, decision, { rttMs: meta.rttMs, blockedId: meta.blockedId });
    if (decision !== "allow") console.log(JSON.stringify({ event: "decision", decision, route: meta.route, limit: meta.limit, region, id: meta.blockedId ?? null }));
  }
  return withHeaders(res, { "Sluice-Decision": decision, "Sluice-Region": region });
}
