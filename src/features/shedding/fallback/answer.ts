/*
 * A fallback route's answer in the origin's place: the last good copy of its page, else its
 * static page. Asked by the steps that stand in for the origin (shedding on a refusal, the
 * breaker while it is open), so it sits below both.
 */
import type { Context } from "hono";
import type { Route } from "../../../config/index.js";
import type { Scope } from "../../../context.js";
import { originRequest } from "../../../origin/forward.js";
import { orElse } from "../../../util/log.js";
import { findCopy, type CopyAddress } from "./copies.js";

/** Where a fallback copy of this request's page is filed: what the origin is asked, never the matching view. */
export function copyAddress(scope: Scope): CopyAddress {
  return {
    host: scope.facts.url.host,
    route: routeOf(scope).name,
    path: scope.forwardPath,
    search: scope.facts.url.search,
  };
}

/** The cached copy (GET/HEAD of fallback routes), else the route's static fallback, else nothing. */
export async function fallbackFor(c: Context, scope: Scope): Promise<Response | undefined> {
  const route = routeOf(scope);
  const method = scope.method;
  if (route.on_limit === "fallback" && (method === "GET" || method === "HEAD")) {
    // a response's Vary refers to the headers the origin was sent, not the client's
    const sent = scope.target ? originRequest(c.req.raw, scope.target).headers : c.req.raw.headers;
    const copy = await orElse(findCopy(copyAddress(scope), sent, method), undefined, "fallback_copy_read_failed", {
      route: route.name,
    });
    if (copy) return copy;
  }
  const s = route.fallback;
  if (!s) return undefined;
  return new Response(method === "HEAD" ? null : s.body, {
    status: s.status,
    headers: { "content-type": s.content_type, "cache-control": "no-store" },
  });
}

function routeOf(scope: Scope): Route {
  if (!scope.route) throw new Error("a shedding step ran without a route");
  return scope.route;
}
