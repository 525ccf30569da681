/*
 * A fallback route's answer in the origin's place: the last good copy of its page, else its
 * static page. Asked by the steps that stand in for the origin (shedding on a refusal, the
 * breaker while it is open), so it sits below both.
 */
import type { ShedSite } from "../site.js";
import { originRequest } from "../../../origin/forward.js";
import { orElse } from "../../../util/log.js";
import { findCopy, type CopyAddress } from "./copies.js";

/** Where a fallback copy of this request's page is filed: what the origin is asked, never the matching view. */
export function copyAddress(
  site: Pick<ShedSite, "route" | "forwardPath"> & { facts: Pick<ShedSite["facts"], "url"> },
): CopyAddress {
  return {
    host: site.facts.url.host,
    route: site.route.name,
    path: site.forwardPath,
    search: site.facts.url.search,
  };
}

/** The cached copy (GET/HEAD of fallback routes), else the route's static fallback, else nothing. */
export async function fallbackFor(site: ShedSite): Promise<Response | undefined> {
  const { route, method } = site;
  if (route.on_limit === "fallback" && (method === "GET" || method === "HEAD")) {
    // a response's Vary refers to the headers the origin was sent, not the client's
    const sent = site.target ? originRequest(site.request, site.target).headers : site.request.headers;
    const copy = await orElse(findCopy(copyAddress(site), sent, method), undefined, "fallback_copy_read_failed", {
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
