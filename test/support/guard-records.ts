import type { Redis } from "@upstash/redis";

/**
 * Reading the guards' state in Redis, so that a test waits for a state (a lease that lapsed, a key
 * completed, a lock released) by polling it, never by sleeping a guessed time.
 */

export const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Redis's own clock (what the scripts' leases count in), in ms. */
export async function redisNowMs(redis: Redis): Promise<number> {
  const [s, us] = await redis.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/** Polls `probe` every 100 ms until `done` says so, at most `capMs`; gives the last value. */
export async function pollUntil<T>(probe: () => Promise<T>, done: (t: T) => boolean, capMs = 30_000): Promise<T> {
  const until = Date.now() + capMs;
  let t = await probe();
  while (!done(t) && Date.now() < until) {
    await pause(100);
    t = await probe();
  }
  return t;
}

/** Waits until Redis's clock is past `ms` (a lease's end, a window's), however slow the machine. */
export async function untilRedisPast(redis: Redis, ms: number): Promise<void> {
  await pollUntil(
    () => redisNowMs(redis),
    (now) => now > ms,
    Math.max(30_000, ms - Date.now() + 30_000),
  );
}

/** A hash as the Upstash client gives it without deserialisation (a flat list), or an object: as an object. */
function asFields(reply: unknown): Record<string, string> {
  if (!Array.isArray(reply)) return (reply ?? {}) as Record<string, string>;
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < reply.length; i += 2) fields[String(reply[i])] = String(reply[i + 1]);
  return fields;
}

/** The idempotency records of a route (the hash fields), by key name. */
export async function idempotencyRecords(
  redis: Redis,
  prefix: string,
  route: string,
): Promise<Array<{ key: string; hash: string; fields: Record<string, string> }>> {
  // records only: `{prefix}:idem:{route}:{key hash}`, not the route's fence, replay buckets or index of indeterminate keys
  const records = `${prefix}:idem:${route}:`;
  const keys = ((await redis.keys(`${records}*`)) as string[]).filter((k) =>
    /^[0-9a-f]{32}$/.test(k.slice(records.length)),
  );
  return Promise.all(
    keys.map(async (key) => ({
      key,
      hash: key.slice(key.lastIndexOf(":") + 1),
      fields: asFields(await redis.hgetall(key)),
    })),
  );
}

/** The session locks under a prefix (the hash fields), by key name. */
export async function sessionLocks(
  redis: Redis,
  prefix: string,
): Promise<Array<{ key: string; fields: Record<string, string> }>> {
  const keys = ((await redis.keys(`${prefix}:session:*`)) as string[]).filter((k) => !k.endsWith(":fence"));
  return Promise.all(keys.map(async (key) => ({ key, fields: asFields(await redis.hgetall(key)) })));
}

/**
 * Whether a Redis command (as the bridge sees it) runs `lua/idempotency.lua`'s or
 * `lua/session.lua`'s `op`: EVAL/EVALSHA, script, key count, keys, then ARGV[1], the op.
 */
export function isScriptOp(command: string[], op: string): boolean {
  const name = (command[0] ?? "").toLowerCase();
  if (name !== "eval" && name !== "evalsha") return false;
  return command[3 + Number(command[2])] === op;
}

/** The ledger's entries, oldest first, each as its fields. */
export async function ledgerEntries(redis: Redis, prefix: string): Promise<Array<Record<string, string>>> {
  const raw = (await redis.xrange(`${prefix}:ledger`, "-", "+")) as unknown;
  // without deserialisation the client gives [[id, [field, value, …]], …]
  if (Array.isArray(raw)) return raw.map((entry: unknown) => asFields(Array.isArray(entry) ? entry[1] : undefined));
  return Object.values((raw ?? {}) as Record<string, Record<string, string>>);
}
