/**
 * The Redis client sluice drives: exactly the methods it calls, with the arguments
 * `@upstash/redis` takes. sluice's own REST client (rest-client.ts) implements it, and a caller's
 * own `@upstash/redis` client (`Redis`, of the root or the `/cloudflare` entry) satisfies it as it
 * is, structurally: sluice never imports that package as a value, so only apps that hand in a
 * client of their own bundle it. Replies are typed `unknown`: the typed commands (commands.ts)
 * read them whichever way the client gave them (raw, or deserialised by a caller's client).
 */
export interface RedisClient {
  get(key: string): Promise<unknown>;
  set(key: string, value: string, options: RedisSetOptions): Promise<unknown>;
  getdel(key: string): Promise<unknown>;
  del(...keys: string[]): Promise<unknown>;
  pttl(key: string): Promise<unknown>;
  pexpire(key: string, ms: number): Promise<unknown>;
  expire(key: string, seconds: number): Promise<unknown>;
  hgetall(key: string): Promise<unknown>;
  hset(key: string, fields: Record<string, string>): Promise<unknown>;
  hdel(key: string, ...fields: string[]): Promise<unknown>;
  hlen(key: string): Promise<unknown>;
  xadd(key: string, id: "*", fields: Record<string, string>, options: RedisXAddOptions): Promise<unknown>;
  xrevrange(key: string, end: string, start: string, count: number): Promise<unknown>;
  ping(): Promise<unknown>;
  eval(script: string, keys: string[], args: string[]): Promise<unknown>;
  evalsha(sha: string, keys: string[], args: string[]): Promise<unknown>;
  evalRo(script: string, keys: string[], args: string[]): Promise<unknown>;
  evalshaRo(sha: string, keys: string[], args: string[]): Promise<unknown>;
  pipeline(): RedisPipeline;
}

/** SET's expiry (`px` ms or `ex` s), and `nx` when asked (a union, as `@upstash/redis` types it). */
export type RedisSetOptions = { px: number } | { ex: number } | { px: number; nx: true } | { ex: number; nx: true };

/** XADD's cap on the stream's length. */
export interface RedisXAddOptions {
  trim: { type: "MAXLEN"; threshold: number; comparison: "~" };
}

/**
 * Commands queued for one `/pipeline` request: each builder queues its command (what it returns
 * is not used), `exec` sends them and gives the replies in order, throwing when one failed.
 */
export interface RedisPipeline {
  get(key: string): unknown;
  set(key: string, value: string, options: RedisSetOptions): unknown;
  incr(key: string): unknown;
  decr(key: string): unknown;
  del(...keys: string[]): unknown;
  pttl(key: string): unknown;
  pexpire(key: string, ms: number, option?: "NX" | "GT"): unknown;
  expire(key: string, seconds: number): unknown;
  hget(key: string, field: string): unknown;
  hdel(key: string, ...fields: string[]): unknown;
  hgetall(key: string): unknown;
  hmget(key: string, ...fields: string[]): unknown;
  hset(key: string, fields: Record<string, string>): unknown;
  hincrby(key: string, field: string, n: number): unknown;
  zincrby(key: string, n: number, member: string): unknown;
  zrange(key: string, start: number, stop: number, options: { rev: true; withScores: true }): unknown;
  length(): number;
  exec(): Promise<unknown>;
}
