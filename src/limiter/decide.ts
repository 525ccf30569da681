import decideLua from "../../lua/decide.lua";
import type { Limit } from "../config/index.js";
import type { Script, Store } from "../store/redis.js";
import { StoreError } from "../store/deadline.js";
import type { BlockedBuckets } from "./blocked.js";
import type { Decision, LimitOutcome } from "./types.js";

export interface Bucket {
  limit: Limit;
  key: string;
}

/**
 * Decides a request against every limit of its route in one Redis round trip (one EVALSHA of
 * `lua/decide.lua`), all or nothing. Buckets known to be closed are answered from `blocked`
 * without calling Redis at all. Throws `StoreError` when Redis fails; the caller applies
 * `on_store_error`.
 *
 * @example
 * const d = await decide(buckets, store, store.script(DECIDE_SCRIPT), blocked, Date.now());
 * if (d.verdict === "reject") return tooManyRequests(d.blocking);
 */
export async function decide(buckets: Bucket[], store: Store, script: Script, blocked: BlockedBuckets, now: number): Promise<Decision> {
  const cached = fromCache(buckets, blocked, now);
  if (cached) return cached;

  const args = buckets.flatMap(({ limit: l }) => [l.refillPerUs, l.unit, l.burst, l.cost, l.shadow ? 1 : 0]);
  const reply = await store.run(script, buckets.map((b) => b.key), args);
  const numbers = asNumbers(reply, 1 + 4 * buckets.length);
  const outcomes = buckets.map(({ limit, key }, i): LimitOutcome => ({
    limit,
    key,
    allowed: numbers[1 + 4 * i] === 1,
    remaining: numbers[2 + 4 * i] as number,
    retryAfterMs: numbers[3 + 4 * i] as number,
    resetMs: numbers[4 + 4 * i] as number,
  }));

  const refusing = outcomes.filter((o) => !o.allowed && !o.limit.shadow);
  if (numbers[0] !== 1 || refusing.length > 0) {
    for (const o of refusing) if (o.retryAfterMs > 0) blocked.block(o.key, now + o.retryAfterMs);
    return { verdict: "reject", outcomes, blocking: longestWait(refusing.length > 0 ? refusing : outcomes), cached: false };
  }
  return { verdict: outcomes.some((o) => !o.allowed) ? "shadow" : "allow", outcomes };
}

/** The script source, for `store.script()`. */
export const DECIDE_SCRIPT: string = decideLua;

function fromCache(buckets: Bucket[], blocked: BlockedBuckets, now: number): Decision | undefined {
  const outcomes: LimitOutcome[] = [];
  for (const { limit, key } of buckets) {
    if (limit.shadow) continue;
    const wait = blocked.remaining(key, now);
    if (wait > 0) outcomes.push({ limit, key, allowed: false, remaining: 0, retryAfterMs: wait, resetMs: wait });
  }
  if (outcomes.length === 0) return undefined;
  return { verdict: "reject", outcomes, blocking: longestWait(outcomes), cached: true };
}

/** The refusal that lasts longest is the honest Retry-After: the request needs every limit. */
function longestWait(outcomes: LimitOutcome[]): LimitOutcome {
  return outcomes.reduce((a, b) => (b.retryAfterMs < 0 || (a.retryAfterMs >= 0 && b.retryAfterMs > a.retryAfterMs) ? b : a));
}

function asNumbers(reply: unknown, length: number): number[] {
  if (!Array.isArray(reply) || reply.length !== length || !reply.every((v) => typeof v === "number")) {
    throw new StoreError("error", `unexpected reply from decide.lua: ${JSON.stringify(reply).slice(0, 200)}`);
  }
  return reply as number[];
}
