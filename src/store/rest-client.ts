import type { RedisClient, RedisPipeline, RedisSetOptions, RedisXAddOptions } from "./client.js";
import { StoreError } from "./deadline.js";
import { redact } from "../util/log.js";

/**
 * sluice's own client for Upstash's REST protocol: `fetch`, a JSON array per command, `/pipeline`
 * for several. It is what sluice uses for a URL and token, so a Worker does not carry a general
 * Redis client. On purpose it does less than `@upstash/redis`:
 * - replies as Upstash sends them (no base64 encoding asked for, no deserialisation);
 * - no retries: a retry cannot fit in a decision's budget of tens of milliseconds;
 * - every HTTP request gets a fresh `AbortSignal` of the store's budget at that moment, and an
 *   abort rejects (the runner's deadline makes it a timeout);
 * - an error reply is thrown as an `Error` whose message is Upstash's error text (so NOSCRIPT is
 *   recognised as in script.ts), other HTTP failures with their status;
 * - a URL that cannot be a REST endpoint (`rediss://…`, no scheme) and a database that refuses the
 *   token (HTTP 401/403) are the deployment's mistake, not an outage: a `StoreError`
 *   "misconfigured" naming the setting to fix (the URL is not even fetched);
 * - no error it throws carries the token or a URL's user and password.
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

/** The settings a URL and token were read from, named in the errors that say which one to fix. */
export interface CredentialNames {
  url: string;
  token: string;
}

/** A middleware's `redis: { url, token }` option, when no Worker variable is behind the credentials. */
export const OPTION_NAMES: CredentialNames = { url: "redis.url", token: "redis.token" };

/** Where and how: the REST URL, the token, and the time budget of one HTTP request (ms). */
export interface RestClientOptions {
  url: string;
  token: string;
  timeoutMs: () => number;
  /** Which settings the URL and token come from (default: the `redis` option's fields). */
  names?: CredentialNames;
}

/**
 * Why `url` cannot be an Upstash-style REST endpoint, or undefined when it can: it must be an
 * http(s) URL with a host and no user or password (the token travels in a header). The text
 * follows the setting's name and quotes nothing of the URL but its scheme.
 *
 * @example restEndpointProblem("rediss://default:pw@eu1.upstash.io:6379") // 'is a Redis protocol URL (rediss://), …'
 */
export function restEndpointProblem(url: string): string | undefined {
  const rest = 'the database\'s REST URL (https://…, in the Upstash console under "REST API")';
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `is not a URL with a scheme: set it to ${rest}`;
  }
  const scheme = parsed.protocol;
  if (scheme === "redis:" || scheme === "rediss:")
    return `is a Redis protocol URL (${scheme}//), which sluice does not speak: set it to ${rest}`;
  if (scheme !== "http:" && scheme !== "https:") return `is not an http(s) URL (${scheme}//): set it to ${rest}`;
  if (parsed.host === "") return `has no host: set it to ${rest}`;
  if (parsed.username !== "" || parsed.password !== "")
    return "carries a user and password, which a REST URL has none of (the token goes in its own setting)";
  return undefined;
}

/** A client for one database. */
export function restClient(opts: RestClientOptions): RedisClient {
  const names = opts.names ?? OPTION_NAMES;
  const problem = restEndpointProblem(opts.url);
  const base = opts.url.replace(/\/+$/, "");
  // Read-your-writes on a database with read replicas: Upstash's token for the last write seen.
  let syncToken = "";
  const post = async (path: string, body: unknown): Promise<unknown> => {
    // never fetched: the runtime's error would quote the URL, password and all
    if (problem !== undefined) throw new StoreError("misconfigured", `${names.url} ${problem}`, names.url);
    const headers: Record<string, string> = {
      authorization: `Bearer ${opts.token}`,
      "content-type": "application/json",
    };
    if (syncToken) headers["upstash-sync-token"] = syncToken;
    const signal = AbortSignal.timeout(opts.timeoutMs());
    const response = await fetchScrubbed(base + path, { method: "POST", headers, body: JSON.stringify(body), signal }, [
      opts.token,
    ]);
    if (response.status === 401 || response.status === 403)
      throw refused(response.status, withoutSecrets(await response.text(), [opts.token]), names);
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

/**
 * `fetch`, whose failure is thrown without the secrets given or a URL's credentials (a runtime's
 * network error may quote the URL): the same class of error, so a timeout is still a timeout.
 */
async function fetchScrubbed(url: string, init: RequestInit, secrets: string[]): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (e) {
    if (!(e instanceof Error) || e.name === "AbortError" || e.name === "TimeoutError") throw e;
    const message = withoutSecrets(e.message, secrets);
    throw e instanceof TypeError ? new TypeError(message) : new Error(message);
  }
}

/** `text` with every secret given, and a URL's credentials, replaced by `***`. */
function withoutSecrets(text: string, secrets: string[]): string {
  return redact(secrets.reduce((t, secret) => (secret ? t.split(secret).join("***") : t), text));
}

/** The database refused the token: the deployment's mistake, named for the operator, with the database's own words. */
function refused(status: number, text: string, names: CredentialNames): StoreError {
  let said: string | undefined;
  try {
    said = errorOf(JSON.parse(text))?.slice(0, 120);
  } catch {
    said = undefined;
  }
  const why =
    status === 401
      ? `is not a token of the database ${names.url} names`
      : "may not run the commands sluice needs (a read-only token?)";
  return new StoreError(
    "misconfigured",
    `the database refused ${names.token} (HTTP ${status}${said ? `: ${said}` : ""}): it ${why}; set the database's REST token`,
    names.token,
  );
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
