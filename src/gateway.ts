import { loadConfig, type Config, type ConfigResult } from "./config/index.js";
import type { Env } from "./env.js";
import { clientIp, type RequestFacts } from "./keys/identify.js";
import { BlockedBuckets } from "./limiter/blocked.js";
import { bucketsFor } from "./limiter/buckets.js";
import { decide, type Defer } from "./limiter/decide.js";
import { rateLimitHeaders, retryAfterSeconds } from "./limiter/headers.js";
import type { Decision } from "./limiter/types.js";
import { forward } from "./origin/forward.js";
import { chooseRegion, regionStore } from "./region/index.js";
import { nudgeRebalance } from "./region/rebalance.js";
import { normalisePath } from "./routing/normalise.js";
import { findRoute } from "./routing/route.js";
import { problem, type DecisionHeader } from "./shed/problem.js";
import { StoreError } from "./store/deadline.js";

/** Isolate-wide state: survives between requests of one isolate, never shared between isolates. */
const blocked = new BlockedBuckets(10_000);
let memo: { sluice: unknown; origin: unknown; result: ConfigResult } | undefined;

/**
 * The request path of sluice, in one direction: configuration → normalise path → match route →
 * derive buckets → one Redis call decides every limit → forward, or shed → headers.
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
  const normal = normalisePath(url.pathname);
  if (!normal.ok) return stamp(problem({ status: normal.status, title: "Bad request path", detail: normal.detail }), "reject", region);

  const ip = clientIp(request.headers);
  const target = { origin: config.originUrl, path: normal.path.forward, clientIp: ip };
  const route = findRoute(config.routes, request.method, normal.path.match);
  if (!route || route.limits.length === 0) return stamp(await forward(request, target), "allow", region);

  const facts: RequestFacts = { ip, matchPath: normal.path.match, headers: request.headers, url };
  const stores = { region, regional: regionStore(env, config, region), home: regionStore(env, config, config.home_region) };
  let decision: Decision;
  try {
    const buckets = await bucketsFor(route, facts, config, stores);
    decision = await decide(buckets, blocked, Date.now(), defer);
  } catch (e) {
    if (!(e instanceof StoreError)) throw e;
    return storeTrouble(e, config, request, target, region, route.name);
  }
  if (route.limits.some((l) => l.scope === "split")) nudgeRebalance(config, env, Date.now(), defer);

  if (decision.verdict === "reject") return stamp(tooManyRequests(decision, route.name), "reject", region);
  const res = await forward(request, target);
  return stamp(withHeaders(res, rateLimitHeaders(decision.outcomes)), decision.verdict, region);
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

async function storeTrouble(e: StoreError, config: Config, request: Request, target: Parameters<typeof forward>[1], region: string, route: string): Promise<Response> {
  console.error(JSON.stringify({ event: "store_error", reason: e.reason, region, route, on_store_error: config.on_store_error, message: e.message }));
  if (config.on_store_error === "open") return stamp(await forward(request, target), "degraded", region);
  return stamp(
    problem({
      status: 503,
      title: "Rate limiter unavailable",
      detail: `the rate limit store did not answer (${e.reason}) and this deployment fails closed`,
      headers: { "Retry-After": "1" },
    }),
    "reject",
    region,
  );
}

/** The configuration of this isolate's environment, validated once and kept. */
export function configOf(env: Env): ConfigResult {
  if (!memo || memo.sluice !== env.SLUICE || memo.origin !== env.ORIGIN_URL) {
    memo = { sluice: env.SLUICE, origin: env.ORIGIN_URL, result: loadConfig(env) };
  }
  return memo.result;
}

function withHeaders(res: Response, headers: Record<string, string>): Response {
  for (const [k, v] of Object.entries(headers)) res.headers.set(k, v);
  return res;
}

function stamp(res: Response, decision: DecisionHeader, region: string): Response {
  return withHeaders(res, { "Sluice-Decision": decision, "Sluice-Region": region });
}
