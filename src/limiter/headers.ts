import type { LimitOutcome } from "./types.js";

/**
 * `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers) for the enforced
 * limit closest to exhaustion: the one with the fewest requests left at its cost, and on a tie
 * the one that takes longest to refill. `w` must be whole seconds, so a sub-second or odd period
 * is scaled up to the next whole second with its quota scaled alike. Shadow limits are never
 * advertised: they do not bind the client.
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
  const q = Math.floor((rate * w * 1000) / period);
  const burstParam = burst !== rate ? `;burst=${burst}` : "";
  return {
    "RateLimit-Policy": `"${name}";q=${q};w=${w}${burstParam}`,
    RateLimit: `"${name}";r=${Math.max(0, o.remaining)};t=${Math.ceil(Math.max(0, o.resetMs) / 1000)}`,
  };
}

/** Whole seconds, rounded up, never less than one: a refused request should not retry at once. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}
