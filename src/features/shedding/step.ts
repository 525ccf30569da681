import type { Route } from "../../config/index.js";
import type { Scope, Step } from "../../context.js";
import { rateLimitHeaders } from "../rate-limit/headers.js";
import { tooManyRequests, withHeaders } from "../rate-limit/refusal.js";
import { noteRefusal, type Shed } from "../rate-limit/step.js";
import { enqueue } from "./queue/enqueue.js";
import { overflowAnswer } from "./queue/overflow.js";
import { copyAddress, fallbackFor } from "./fallback/answer.js";
import { isKeepable, keepCopy } from "./fallback/copies.js";
import { divert } from "./divert.js";
import { countDivert } from "../../metrics/diverts.js";
import { settleQuietly } from "../../util/log.js";

/** A way to answer a request its limits refused: the response, with `scope.decision` set; or a thrown problem. */
type Strategy = Shed;

/** The shedding strategies, by the route's `on_limit`: the one place a strategy is chosen. */
const STRATEGIES: Record<Route["on_limit"], Strategy> = {
  reject: async (_c, scope, refusal) => {
    throw tooManyRequests(refusal, routeOf(scope).name);
  },
  fallback: async (c, scope, refusal) => {
    const copy = await fallbackFor(c, scope);
    if (!copy) throw tooManyRequests(refusal, routeOf(scope).name);
    scope.decision = "fallback";
    return withHeaders(copy, rateLimitHeaders([refusal.blocking]));
  },
  queue: async (c, scope, refusal) => {
    const queued = await enqueue(c.req.raw, scope, refusal.blocking);
    if ("overflow" in queued) return overflowAnswer(c, scope, routeOf(scope), refusal, queued.overflow);
    scope.decision = queued.decision;
    return queued.response;
  },
  // the divert origin's answer; if it has none, what `fallback` would give (static page, else 429)
  divert: async (c, scope, refusal) => {
    const diverted = await divert(c, scope, routeOf(scope));
    if (!diverted) return STRATEGIES.fallback(c, scope, refusal);
    scope.decision = "diverted";
    countDivert(scope.runtime.metrics, routeOf(scope).name, "limit");
    return withHeaders(diverted, rateLimitHeaders([refusal.blocking]));
  },
};

/** A refused request, as the route's `on_limit` says: 429, the last good copy, the queue, or the divert origin. */
export const shed: Shed = async (c, scope, refusal) => {
  await noteRefusal(scope, refusal);
  return STRATEGIES[routeOf(scope).on_limit](c, scope, refusal);
};

/**
 * Keeps the origin's answer as the last good copy of a fallback route's page, after the
 * response (`waitUntil`), when a shared cache may keep it.
 */
export const keepFallbackCopies: Step = async (c, scope, next) => {
  await next();
  const route = scope.route;
  const reply = scope.reply;
  if (
    route?.on_limit !== "fallback" ||
    reply?.outcome !== "answered" ||
    !isKeepable(c.req.raw, reply.response, route.fallback_cookies)
  )
    return;
  scope.defer(
    settleQuietly(
      keepCopy(copyAddress(scope), reply.sent, reply.response.clone(), route.fallback_ttl),
      "fallback_copy_keep_failed",
      { route: route.name },
    ),
  );
};

function routeOf(scope: Scope): Route {
  if (!scope.route) throw new Error("a shedding step ran without a route");
  return scope.route;
}
