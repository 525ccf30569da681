import type { RedisClient, RedisPipeline, RedisSetOptions } from "./client.js";
import { asHash } from "./replies.js";

/**
 * The Redis commands sluice sends besides its scripts, as typed operations of a `Store`. Each one
 * is one REST request, sent through the store's runner (`guarded` in redis.ts): under the store's
 * deadline, through its circuit. Replies come as the client gives them without deserialisation.
 */

/** One request to the database: the runner's deadline and circuit around `send`. */
export type Call = <T>(send: (client: RedisClient) => Promise<T>) => Promise<T>;

/** How long a written key lives: `px` ms or `ex` s; `nx`: only when the key does not exist yet. */
export interface SetOptions {
  px?: number;
  ex?: number;
  nx?: boolean;
}

/** Strings and key lifetimes. */
export interface KeyCommands {
  /** GET: the value as text, `null` when absent. */
  get(key: string): Promise<string | null>;
  /** SET; false when `nx` found the key already there. */
  set(key: string, value: string, options: SetOptions): Promise<boolean>;
  /** GETDEL: the value as text (`null` when absent), and the key gone. */
  getdel(key: string): Promise<string | null>;
  /** DEL: how many of the keys existed. */
  del(...keys: string[]): Promise<number>;
  /** PTTL: ms left, -1 without expiry, -2 absent. */
  pttl(key: string): Promise<number>;
  pexpire(key: string, ms: number): Promise<void>;
  expire(key: string, seconds: number): Promise<void>;
}

/** One hash. */
export interface HashCommands {
  /** HGETALL, as an object of field → value. */
  getAll(key: string): Promise<Record<string, string>>;
  /** HSET of these fields: how many were new. */
  set(key: string, fields: Record<string, string>): Promise<number>;
  /** HDEL: how many of the fields were there. */
  del(key: string, ...fields: string[]): Promise<number>;
  /** HLEN */
  len(key: string): Promise<number>;
}

/** The trails' streams, read (entries are appended by scripts, each with its key's TTL in the same call). */
export interface StreamCommands {
  /** XREVRANGE from `end` down to `start`, at most `count` entries, as the client gives it. */
  revRange(key: string, end: string, start: string, count: number): Promise<unknown>;
}

/**
 * Commands queued for one pipeline request (Upstash's `/pipeline`: one HTTP request, replies in
 * order, not atomic). Each returns the batch, to chain.
 */
export interface Batch {
  incr(key: string): Batch;
  get(key: string): Batch;
  /** SET with PX: the value until `ms` from now. */
  setPx(key: string, value: string, ms: number): Batch;
  decr(key: string): Batch;
  del(key: string): Batch;
  pttl(key: string): Batch;
  /** `onlyWithout`: PEXPIRE … NX, only when the key has no expiry yet. */
  pexpire(key: string, ms: number, onlyWithout?: boolean): Batch;
  /** PEXPIRE so the key lives at least `ms` from now: NX gives a key without an expiry one, GT lengthens a shorter one (two commands). */
  pexpireAtLeast(key: string, ms: number): Batch;
  expire(key: string, seconds: number): Batch;
  hget(key: string, field: string): Batch;
  hgetall(key: string): Batch;
  hmget(key: string, ...fields: string[]): Batch;
  hset(key: string, fields: Record<string, string>): Batch;
  hdel(key: string, field: string): Batch;
  hincrby(key: string, field: string, n: number): Batch;
  zincrby(key: string, n: number, member: string): Batch;
  /** ZRANGE … REV WITHSCORES from rank `start` to `stop`: the highest scores first. */
  zrevrangeWithScores(key: string, start: number, stop: number): Batch;
}

/** A `Batch` over the client's pipeline (whose builders push onto the pipeline itself and return it). */
class PipelineBatch implements Batch {
  constructor(private readonly p: RedisPipeline) {}
  private add(queue: () => unknown): Batch {
    queue();
    return this;
  }
  incr = (key: string) => this.add(() => this.p.incr(key));
  get = (key: string) => this.add(() => this.p.get(key));
  setPx = (key: string, value: string, ms: number) => this.add(() => this.p.set(key, value, { px: ms }));
  decr = (key: string) => this.add(() => this.p.decr(key));
  del = (key: string) => this.add(() => this.p.del(key));
  pttl = (key: string) => this.add(() => this.p.pttl(key));
  pexpire = (key: string, ms: number, onlyWithout = false) =>
    this.add(() => (onlyWithout ? this.p.pexpire(key, ms, "NX") : this.p.pexpire(key, ms)));
  pexpireAtLeast = (key: string, ms: number) =>
    this.add(() => {
      this.p.pexpire(key, ms, "NX");
      this.p.pexpire(key, ms, "GT");
    });
  expire = (key: string, seconds: number) => this.add(() => this.p.expire(key, seconds));
  hget = (key: string, field: string) => this.add(() => this.p.hget(key, field));
  hgetall = (key: string) => this.add(() => this.p.hgetall(key));
  hmget = (key: string, ...fields: string[]) => this.add(() => this.p.hmget(key, ...fields));
  hset = (key: string, fields: Record<string, string>) => this.add(() => this.p.hset(key, fields));
  hdel = (key: string, field: string) => this.add(() => this.p.hdel(key, field));
  hincrby = (key: string, field: string, n: number) => this.add(() => this.p.hincrby(key, field, n));
  zincrby = (key: string, n: number, member: string) => this.add(() => this.p.zincrby(key, n, member));
  zrevrangeWithScores = (key: string, start: number, stop: number) =>
    this.add(() => this.p.zrange(key, start, stop, { rev: true, withScores: true }));
}

/**
 * Builds the commands into one pipeline and sends it as one request; its replies in order. An
 * empty batch sends nothing. Throws when any command failed (the client's default).
 */
export function pipelineOn(call: Call, build: (batch: Batch) => void): Promise<unknown[]> {
  return call(async (client) => {
    const p = client.pipeline();
    build(new PipelineBatch(p));
    return p.length() === 0 ? [] : ((await p.exec()) as unknown[]);
  });
}

export function keyCommands(call: Call): KeyCommands {
  return {
    get: (key) => call((c) => c.get(key)).then(text),
    set: (key, value, o) => call((c) => c.set(key, value, setOptions(o))).then((reply) => reply !== null),
    getdel: (key) => call((c) => c.getdel(key)).then(text),
    del: (...keys) => call((c) => c.del(...keys)).then(Number),
    pttl: (key) => call((c) => c.pttl(key)).then(Number),
    pexpire: (key, ms) => call((c) => c.pexpire(key, ms)).then(() => undefined),
    expire: (key, seconds) => call((c) => c.expire(key, seconds)).then(() => undefined),
  };
}

export function hashCommands(call: Call): HashCommands {
  return {
    getAll: (key) => call((c) => c.hgetall(key)).then(asHash),
    set: (key, fields) => call((c) => c.hset(key, fields)).then(Number),
    del: (key, ...fields) => call((c) => c.hdel(key, ...fields)).then(Number),
    len: (key) => call((c) => c.hlen(key)).then(Number),
  };
}

export function streamCommands(call: Call): StreamCommands {
  return {
    revRange: (key, end, start, count) => call((c) => c.xrevrange(key, end, start, count)),
  };
}

/** The client's SET options: one expiry, `nx` only when asked. */
function setOptions(o: SetOptions): RedisSetOptions {
  const expiry = o.px !== undefined ? { px: o.px } : { ex: o.ex as number };
  return o.nx ? { ...expiry, nx: true } : expiry;
}

/**
 * A string reply as text. A client handed in by the caller may deserialise replies (a number,
 * an object from JSON): they are given back as the text Redis holds.
 */
function text(reply: unknown): string | null {
  if (reply === null || reply === undefined) return null;
  return typeof reply === "string" ? reply : typeof reply === "object" ? JSON.stringify(reply) : String(reply);
}
