/*
 * The shedder: every answer sluice gives without the origin, for whatever reason it gives one (a
 * limit refused the request, the queue cannot take it, the operator switched the route, its
 * breaker is open). One cascade, asked the same way by each: the divert origin where the reason
 * allows it, else the last good copy or the static fallback page, else the reason's problem.
 * Plain inputs, no Hono: an adapter (a step, the MCP gateway for one JSON-RPC call) builds the
 * site and sets what the answer decided.
 */
import { countDivert } from "../../metrics/diverts.js";
import type { Problem } from "../../problem.js";
import { rateLimitHeaders } from "../rate-limit/headers.js";
import { tooManyRequests, withHeaders, type Refusal } from "../rate-limit/refusal.js";
import { divert } from "./divert.js";
import { fallbackFor } from "./fallback/fallback-page.js";
import { breakerOpenProblem, queueFullProblem, switchedProblem, type SwitchedMode } from "./last-word.js";
import type { Overflow } from "./queue/enqueue.js";
import type { ShedSite } from "./site.js";
import type { Route } from "../../config/index.js";

/** Why a request is answered without its origin. */
export type ShedReason =
  /** A limit refused it: as the route's `on_limit` says (`reject`, `fallback`, `divert`; `queue` is the queue's). */
  | { kind: "limit"; refusal: Refusal }
  /** `on_limit = "queue"`, and the queue cannot take it (full, its client's share full, or too long a wait). */
  | { kind: "queue-full"; refusal: Refusal; overflow: Overflow }
  /** The operator's degrade switch (`fallback`, `reject`, or a `divert` not sent as failover). */
  | { kind: "switch"; switched: SwitchedMode }
  /** The route's circuit breaker is open (and the request does not fail over). */
  | { kind: "breaker"; retryAfterMs: number };

/** An answer the shedder gave: what the client gets, and what `Sluice-Decision` says of it. */
export interface ShedAnswer {
  response: Response;
  decision: "fallback" | "diverted";
}

/** One reason's cascade: whether it may divert (and is counted as what), fall back, and with which headers. */
interface Cascade {
  divertAs?: "limit" | "mode";
  fallback: boolean;
  headers: Record<string, string>;
  lastWord: () => Problem;
}

/**
 * Answers a request without its origin, as `reason`'s cascade says: the divert origin's answer
 * (a refusal on a `divert` route, the `divert` switch), else the last good copy or the static
 * fallback page, else throws the reason's problem (429, 503). The `RateLimit` headers of a
 * refusing limit go on whatever answers it.
 *
 * @example
 * const { response, decision } = await answerWithoutOrigin(site, { kind: "breaker", retryAfterMs: 5_000 });
 */
export async function answerWithoutOrigin(site: ShedSite, reason: ShedReason): Promise<ShedAnswer> {
  const cascade = cascadeOf(site.route, reason);
  if (cascade.divertAs) {
    const diverted = await divert(site, site.route);
    if (diverted) {
      countDivert(site.metrics, site.route.name, cascade.divertAs);
      return { response: withHeaders(diverted, cascade.headers), decision: "diverted" };
    }
  }
  if (cascade.fallback) {
    const copy = await fallbackFor(site);
    if (copy) return { response: withHeaders(copy, cascade.headers), decision: "fallback" };
  }
  throw cascade.lastWord();
}

function cascadeOf(route: Route, reason: ShedReason): Cascade {
  switch (reason.kind) {
    case "limit": {
      const onLimit = route.on_limit;
      return {
        divertAs: onLimit === "divert" ? "limit" : undefined,
        // a divert origin that gave nothing: what `fallback` would give (static page, else 429)
        fallback: onLimit === "fallback" || onLimit === "divert",
        headers: rateLimitHeaders([reason.refusal.blocking]),
        lastWord: () => tooManyRequests(reason.refusal, route.name),
      };
    }
    case "queue-full":
      return {
        fallback: true,
        headers: rateLimitHeaders([reason.refusal.blocking]),
        lastWord: () => queueFullProblem(route, reason.refusal, reason.overflow),
      };
    case "switch":
      return {
        divertAs: reason.switched.mode === "divert" ? "mode" : undefined,
        fallback: reason.switched.mode !== "reject",
        // no limit refused it: no `RateLimit` headers to report
        headers: {},
        lastWord: () => switchedProblem(route, reason.switched),
      };
    case "breaker":
      return { fallback: true, headers: {}, lastWord: () => breakerOpenProblem(route, reason.retryAfterMs) };
  }
}
