import type { Context } from "hono";
import type { Route } from "../../config/index.js";
import type { Scope, SluiceEnv, Step } from "../../context.js";
import { noteRefusal, type Shed } from "../rate-limit/step.js";
import { enqueue } from "./queue/enqueue.js";
import { countOverflow } from "./queue/overflow.js";
import { copyAddress } from "./fallback/fallback-page.js";
import { isKeepable, keepCopy } from "./fallback/copies.js";
import { answerWithoutOrigin, type ShedReason } from "./shedder.js";
import type { ShedSite } from "./site.js";
import { settleQuietly } from "../../util/log.js";

/**
 * A refused request, as the route's `on_limit` says: the queue takes it (`queue`), or the shedder
 * answers it (`reject`: the 429; `fallback`: the last good copy; `divert`: the divert origin).
 */
export const shed: Shed = async (c, scope, refusal) => {
  await noteRefusal(scope, refusal);
  const route = routeOf(scope);
  if (route.on_limit !== "queue") return shedWithoutOrigin(c, scope, { kind: "limit", refusal });
  const queued = await enqueue(c.req.raw, scope, refusal.blocking);
  if ("overflow" in queued) {
    countOverflow(scope.runtime.metrics, route.name, queued.overflow);
    return shedWithoutOrigin(c, scope, { kind: "queue-full", refusal, overflow: queued.overflow });
  }
  scope.decision = queued.decision;
  return queued.response;
};

/**
 * The shedder's answer for this request (src/features/shedding/shedder.ts), with what it decided
 * set on the scope: every step that answers without the origin (shedding, the degrade switch, an
 * open breaker, a full queue) answers through here.
 */
export async function shedWithoutOrigin(c: Context<SluiceEnv>, scope: Scope, reason: ShedReason): Promise<Response> {
  const answered = await answerWithoutOrigin(shedSite(c, scope), reason);
  scope.decision = answered.decision;
  return answered.response;
}

/** The request as the shedder takes it. */
function shedSite(c: Context, scope: Scope): ShedSite {
  const { method, forwardPath, methodOverridden, facts, target } = scope;
  return {
    request: c.req.raw,
    route: routeOf(scope),
    method,
    forwardPath,
    methodOverridden,
    facts,
    target,
    metrics: scope.runtime.metrics,
  };
}

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
  const address = copyAddress({ route, forwardPath: scope.forwardPath, facts: scope.facts });
  scope.defer(
    settleQuietly(
      keepCopy(address, reply.sent, reply.response.clone(), route.fallback_ttl),
      "fallback_copy_keep_failed",
      {
        route: route.name,
      },
    ),
  );
};

function routeOf(scope: Scope): Route {
  if (!scope.route) throw new Error("a shedding step ran without a route");
  return scope.route;
}
