import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { problemSlug, type ProblemKind } from "./problem-types.js";

/** The decisions sluice reports in `Sluice-Decision` (`diverted`: answered by the route's `divert_url`). */
export type DecisionHeader = "allow" | "reject" | "fallback" | "queued" | "replay" | "shadow" | "diverted" | "degraded";

export interface ProblemInit {
  /** Which problem: a constant of the catalogue (`PROBLEMS.forbidden`), which fixes its title, status and `type`. */
  type: ProblemKind;
  /** One of the type's statuses, where it comes with more than one (its first otherwise). */
  status?: ProblemKind["status"][number];
  /** What happened to this request. */
  detail: string;
  /** Extension members (RFC 9457 §3.2), e.g. `limit` and `retry_after_ms`. */
  extensions?: Record<string, string | number>;
  headers?: Record<string, string>;
}

/**
 * Where problem types point unless `problem_base` says otherwise: pages the Worker serves itself
 * (src/admin/problems.ts), so a type is a URI the deployment owns (RFC 9457 §3.1.1).
 */
export const DEFAULT_PROBLEM_BASE = "/__sluice/problems/";

/** The status a problem answers with: the one its init names, else its type's first. */
export function problemStatus(init: ProblemInit): number {
  return init.status ?? init.type.status[0];
}

/**
 * An RFC 9457 problem response. `type` names the problem so clients can branch on it; the
 * title is fixed per type and the detail says what happened to this request. `base` is the
 * deployment's `problem_base`.
 *
 * @example problem({ type: PROBLEMS.tooManyRequests, detail: "...", extensions: { limit: "per-ip" } })
 */
export function problem(init: ProblemInit, base = DEFAULT_PROBLEM_BASE): Response {
  const status = problemStatus(init);
  const body = JSON.stringify({
    type: base + problemSlug(init.type.title),
    title: init.type.title,
    status,
    detail: init.detail,
    ...init.extensions,
  });
  return new Response(body, {
    status,
    headers: {
      "content-type": "application/problem+json",
      "cache-control": "no-store",
      ...init.headers,
      ...retryAfterMs(status, init),
    },
  });
}

/** Statuses whose `Retry-After` is told in milliseconds too, as the `openai` and `@anthropic-ai/sdk` clients read it. */
const RETRY_AFTER_MS_STATUSES = [409, 429, 503];

/**
 * `retry-after-ms` beside `Retry-After` on a 409, 429 or 503: the problem's exact
 * `retry_after_ms` where it has one, else the header's seconds in ms. Clients that honour it
 * retry when sluice says rather than at the next whole second.
 */
function retryAfterMs(status: number, init: ProblemInit): Record<string, string> {
  if (!RETRY_AFTER_MS_STATUSES.includes(status)) return {};
  const seconds = Object.entries(init.headers ?? {}).find(([h]) => h.toLowerCase() === "retry-after")?.[1];
  if (seconds === undefined) return {};
  const exact = init.extensions?.retry_after_ms;
  const ms = typeof exact === "number" && exact >= 0 ? exact : Number(seconds) * 1000;
  return Number.isFinite(ms) ? { "retry-after-ms": String(Math.round(ms)) } : {};
}

/**
 * The one way sluice refuses a request: thrown by any step, answered by `onError` (or by Hono's
 * default handler in an app of the user's own, which answers an `HTTPException` with its
 * response). It carries its RFC 9457 body and the decision the client is told in `Sluice-Decision`.
 *
 * @example throw new Problem({ type: PROBLEMS.forbidden, detail: "this client is on the deny list" });
 */
export class Problem extends HTTPException {
  constructor(
    readonly init: ProblemInit,
    readonly decision: DecisionHeader = "reject",
    /** The `problem_base` of the configuration that threw it, when the thrower knows it (an app's own error handler does not). */
    readonly base?: string,
  ) {
    super(problemStatus(init) as ContentfulStatusCode, { message: `${init.type.title}: ${init.detail}` });
  }

  /**
   * A fresh response each time (a body can be read once), its type under `base` (the answering
   * scope's `problem_base`), else the thrower's, else the default: Hono's own error handler calls
   * this without one.
   */
  override getResponse(base?: string): Response {
    return problem(this.init, base ?? this.base);
  }
}

/** Whole seconds, rounded up, never less than one: a refused request should not retry at once. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}
