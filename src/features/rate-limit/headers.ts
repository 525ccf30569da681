import type { Limit } from "../../config/index.js";
import type { LimitOutcome } from "./types.js";
import { hasTrait } from "./algorithms/registry.js";

/** What a limit allows, in words, for a refusal's detail: "allows 100 per 1000 ms (burst 50)", "allows 3 in flight at once". */
export function allowance(l: Pick<Limit, "algorithm" | "rate" | "period" | "burst" | "margin">): string {
  if (hasTrait(l.algorithm, "inFlight"))
    return `allows ${l.rate} in flight at once (slots held at most ${l.period} ms)`;
  const margin = l.margin ? ` + a ${l.margin} ms margin` : "";
  return `allows ${l.rate} per ${l.period} ms${margin} (burst ${l.burst})`;
}

/**
 * `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers) for the enforced
 * limit closest to exhaustion: the one with the fewest requests left at its cost, and on a tie
 * the one that takes longest to refill. `w` must be whole seconds, so a sub-second or odd period
 * is scaled up to the next whole second with its quota scaled alike. Shadow limits are never
 * advertised: they do not bind the client.
 *
 * A concurrency limit says `q` = its limit (requests in flight at once), `w` = its slot lease in
 * whole seconds (rounded up: the longest a slot is held, released or not), `r` = the slots left
 * free after this request took one, `t` = seconds until every slot held now has expired at the
 * latest (sooner as requests finish and release theirs).
 *
 * @example rateLimitHeaders(outcomes) // { "RateLimit-Policy": '"per-ip";q=100;w=1', RateLimit: '"per-ip";r=41;t=1' }
 */
export function rateLimitHeaders(outcomes: readonly LimitOutcome[]): Record<string, string> {
  const enforced = outcomes.filter((o) => !o.limit.shadow);
  if (enforced.length === 0) return {};
  const o = enforced.reduce((a, b) => {
    const left = (x: LimitOutcome) => Math.floor(x.remaining / x.cost);
    return left(b) < left(a) || (left(b) === left(a) && b.resetMs > a.resetMs) ? b : a;
  });
  const { name, rate, period, burst } = o.limit;
  const w = Math.max(1, Math.ceil(period / 1000));
  const q = hasTrait(o.limit.algorithm, "inFlight") ? rate : Math.floor((rate * w * 1000) / period);
  const burstParam = burst !== rate ? `;burst=${burst}` : "";
  return {
    "RateLimit-Policy": `"${name}";q=${q};w=${w}${burstParam}`,
    RateLimit: `"${name}";r=${Math.max(0, o.remaining)};t=${Math.ceil(Math.max(0, o.resetMs) / 1000)}`,
  };
}
