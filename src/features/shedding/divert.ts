import type { Route } from "../../config/index.js";
import type { ShedSite } from "./site.js";
import { sendToOrigin, type OriginReply } from "../../origin/forward.js";
import { discardBody } from "../../util/log.js";

/**
 * What a request sent to the divert origin after its guards were taken (failover, which runs
 * after idempotency and sessions) tells it: the claim's fencing token and key, the session; and
 * how long a held claim waits for its answer. A refusal's divert takes none: no claim was taken.
 */
export interface DivertGuards {
  sluiceHeaders?: Record<string, string>;
  lateAnswerMs?: number;
  problemBase?: string;
}

/**
 * Sends `request` to the route's `divert_url`, built exactly as a request to the origin
 * (`sendToOrigin`: same path and query, client-address headers from the trusted IP, `Sluice-*`
 * and method-override headers stripped unless the route honours them), within `divert_timeout`.
 * Every divert, for a refusal or for failover, goes through here.
 */
export function sendToDivert(
  request: Request,
  scope: Pick<ShedSite, "forwardPath" | "methodOverridden"> & { facts: Pick<ShedSite["facts"], "ip"> },
  route: Route & { divertUrl: URL },
  guards: DivertGuards = {},
): Promise<OriginReply> {
  return sendToOrigin(request, {
    origin: route.divertUrl,
    path: scope.forwardPath,
    clientIp: scope.facts.ip,
    timeoutMs: route.divert_timeout,
    methodOverride: scope.methodOverridden,
    ...guards,
  });
}

/**
 * Sends a request that holds no guard to the route's `divert_url`: a refusal, instead of its 429,
 * or under the operator's `divert` switch a request that took no claim or session lock. Nothing
 * sluice tells the origin (fencing token, Idempotency-Key, session) goes with it: no claim was
 * taken for it (the limits run before idempotency and sessions, and the schema gives a route that
 * diverts refusals neither; the switch sends a guarded request through `failover`).
 *
 * Returns the divert origin's response, or `undefined` when it gave none worth relaying
 * (unreachable, too slow, a 5xx, no final response): the refusal then falls back.
 */
export async function divert(site: ShedSite, route: Route): Promise<Response | undefined> {
  // the schema requires divert_url with on_limit = "divert": without one there is nowhere to go
  const divertUrl = route.divertUrl;
  if (!divertUrl) return undefined;
  const reply = await sendToDivert(site.request, site, { ...route, divertUrl });
  if (relayable(reply)) return reply.response;
  // a 5xx body nobody reads would hold the connection open until it is collected
  await discardBody(reply.response.body);
  return undefined;
}

/**
 * Whether the divert origin's reply is an answer for the client. Stricter than `originFailed`:
 * an interim-only (`unrelayable`) reply is no answer either, and the client is better served by
 * the fallback than by a 502 about an origin it never asked for.
 */
function relayable(reply: OriginReply): boolean {
  return reply.outcome === "answered" && reply.response.status < 500;
}
