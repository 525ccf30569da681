import type { RedisClient, RedisPipeline, RedisSetOptions, RedisXAddOptions } from "./client.js";

/**
 * sluice's own client for Upstash's REST protocol: `fetch`, a JSON array per command, `/pipeline`
 * for several. It is what sluice uses for a URL and token, so a Worker does not carry a general
 * Redis client. On purpose it does less than `@upstash/redis`:
 * - replies as Upstash sends them (no base64 encoding asked for, no deserialisation);
 * - no retries: a retry cannot fit in a decision's budget of tens of milliseconds;
 * - every HTTP request gets a fresh `AbortSignal` of the store's budget at that moment, and an
 *   abort rejects (the runner's deadline makes it a timeout);
 * - an error reply is thrown as an `Error` whose message is Upstash's error text (so NOSCRIPT is
 *   recognised as in script.ts), other HTTP failures with their status.
 */

type Arg = string | number;

/** Each command's wire form, from the arguments `RedisClient` takes. */
const COMMANDS = {
  get: (key: string) => ["get", key],
  set: (key: string, value: string, o: RedisSetOptions) => [
    "set",
    key,
    value,
    ...("nx" in o ? ["nx"] : []),
    ...("px" in o ? ["px", o.px] : ["ex", o.ex]),
  ],
  getdel: (key: string) => ["getdel", key],
  del: (...keys: string[]) => ["del", ...keys],
  incr: (key: string) => ["incr", key],
  decr: (key: string) => ["decr", key],
  pttl: (key: string) => ["pttl", key],
  pexpire: (key: string, ms: number, option?: "NX" | "GT") => ["pexpire", key, ms, ...(option ? [option] : [])],
  expire: (key: string, seconds: number) => ["expire", key, seconds],
  hget: (key: string, field: string) => ["hget", key, field],
  hgetall: (key: string) => ["hgetall", key],
  hmget: (key: string, ...fields: string[]) => ["hmget", key, ...fields],
  hset: (key: string, fields: Record<string, string>) => ["hset", key, ...Object.entries(fields).flat()],
  hdel: (key: string, ...fields: string[]) => ["hdel", key, ...fields],
  hlen: (key: string) => ["hlen", key],
  hincrby: (key: string, field: string, n: number) => ["hincrby", key, field, n],
  zincrby: (key: string, n: number, member: string) => ["zincrby", key, n, member],
  zrange: (key: string, start: number, stop: number, o: { rev: true; withScores: true }) => [
    "zrange",
    key,
    start,
    stop,
    ...(o.rev ? ["rev"] : []),
    ...(o.withScores ? ["withscores"] : []),
  ],
  xadd: (key: string, id: "*", fields: Record<string, string>, { trim }: RedisXAddOptions) => [
    "xadd",
    key,
    trim.type,
    trim.comparison,
    trim.threshold,
    id,
    ...Object.entries(fields).flat(),
  ],
  xrevrange: (key: string, end: string, start: string, count: number) => ["xrevrange", key, end, start, "count", count],
  ping: () => ["ping"],
  eval: script("eval"),
  evalsha: script("evalsha"),
  evalRo: script("eval_ro"),
  evalshaRo: script("evalsha_ro"),
} satisfies Record<string, (...args: never[]) => Arg[]>;

/** EVAL and its kin: the body or SHA-1, the number of keys, the keys, the arguments. */
function script(name: string) {
  return (body: string, keys: string[], args: string[]): Arg[] => [name, body, keys.length, ...keys, ...args];
}

type Commands<R> = { [K in keyof typeof COMMANDS]: (...args: Parameters<(typeof COMMANDS)[K]>) => R };

/** Every command of the table, each handing its wire form to `send`. */
function commands<R>(send: (command: Arg[]) => R): Commands<R> {
  const built: Record<string, (...args: never[]) => R> = {};
  for (const [name, wire] of Object.entries(COMMANDS))
    built[name] = (...args: never[]) => send((wire as (...a: never[]) => Arg[])(...args));
  return built as Commands<R>;
}

/** Where and how: the REST URL, the token, and the time budget of one HTTP request (ms). */
export interface RestClientOptions {
  url: string;
  token: string;
  timeoutMs: () => number;
}

/** A client for one database. */
export function restClient(opts: RestClientOptions): RedisClient {
  const base = opts.url.replace(/\/+$/, "");
  // Read-your-writes on a database with read replicas: Upstash's token for the last write seen.
  let syncToken = "";
  const post = async (path: string, body: unknown): Promise<unknown> => {
    const headers: Record<string, string> = {
      authorization: `Bearer ${opts.token}`,
      "content-type": "application/json",
    };
    if (syncToken) headers["upstash-sync-token"] = syncToken;
    const signal = AbortSignal.timeout(opts.timeoutMs());
    const response = await fetch(base + path, { method: "POST", headers, body: JSON.stringify(body), signal });
    syncToken = response.headers.get("upstash-sync-token") ?? syncToken;
    return replyOf(response.status, await response.text());
  };
  const pipeline = (): RedisPipeline => {
    const queued: Arg[][] = [];
    const p: RedisPipeline = {
      ...commands((command) => (queued.push(command), p)),
      length: () => queued.length,
      exec: async () => resultsOf(await post("/pipeline", queued)),
    };
    return p;
  };
  return { ...commands((command) => post("", command).then(resultOf)), pipeline };
}

/** The JSON body of a reply; a failed request (a status other than 2xx) thrown with Upstash's error text. */
function replyOf(status: number, text: string): unknown {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`Upstash REST answered HTTP ${status} with a body that is not JSON: ${text.slice(0, 200)}`);
  }
  if (status >= 200 && status < 300) return body;
  const error = errorOf(body) ?? `no error text`;
  // a command's own error (400) is the database's answer, word for word (NOSCRIPT, WRONGTYPE …)
  throw new Error(status === 400 ? error : `Upstash REST answered HTTP ${status}: ${error}`);
}

function errorOf(reply: unknown): string | undefined {
  const error = (reply as { error?: unknown } | null)?.error;
  return typeof error === "string" ? error : undefined;
}

/** One command's `{ result }`, or its `{ error }` thrown. */
function resultOf(reply: unknown): unknown {
  const error = errorOf(reply);
  if (error !== undefined) throw new Error(error);
  return (reply as { result?: unknown } | null)?.result ?? null;
}

/** A pipeline's replies in order; the first failed command's error thrown. */
function resultsOf(replies: unknown): unknown[] {
  if (!Array.isArray(replies)) throw new Error("Upstash REST answered a pipeline with something other than a list");
  return replies.map(resultOf);
}
