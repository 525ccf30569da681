import { Redis } from "@upstash/redis/cloudflare";
import { StoreError, withDeadline } from "./deadline.js";

/** One Redis database as sluice uses it: scripts only, each call bounded in time. */
export interface Store {
  readonly name: string;
  /** Same id, same database: limits of different scopes that meet in one database share one call. */
  readonly id: string;
  /** The client itself, for work off the request path (the rebalancer). */
  readonly redis: Redis;
  /** Runs a Lua script (EVALSHA, then EVAL once on NOSCRIPT) and returns its raw reply. */
  run(script: Script, keys: string[], args: Array<string | number>): Promise<unknown>;
  /** The script object for a source text, made once per isolate (its SHA-1 is computed once). */
  script(source: string): Script;
}

/** A script as the client library keeps it (the SHA-1 is computed once). */
export type Script = ReturnType<Redis["createScript"]>;

export interface StoreOptions {
  name: string;
  url: string;
  token: string;
  timeoutMs: number;
}

const clients = new Map<string, { redis: Redis; scripts: Map<string, Script> }>();

/**
 * A store for one Upstash database. Clients are kept per isolate, so the HTTP connection and
 * the scripts' SHA-1s are reused across requests.
 *
 * @example
 * const store = upstashStore({ name: "us", url, token, timeoutMs: 50 });
 * const reply = await store.run(store.script(decideLua), keys, args);
 */
export function upstashStore(opts: StoreOptions): Store {
  const id = `${opts.url}\u0000${opts.token}\u0000${opts.timeoutMs}`;
  let entry = clients.get(id);
  if (!entry) {
    const redis = new Redis({
      url: opts.url,
      token: opts.token,
      enableTelemetry: false,
      automaticDeserialization: false,
      // A retry cannot fit in a budget of tens of milliseconds: fail fast, let on_store_error decide.
      retry: { retries: 0, backoff: () => 0 },
      // A fresh timeout per HTTP request; a function signal makes an abort throw instead of
      // resolving to the string "Aborted".
      signal: () => AbortSignal.timeout(opts.timeoutMs),
    });
    entry = { redis, scripts: new Map() };
    clients.set(id, entry);
  }
  const { redis, scripts } = entry;
  return {
    name: opts.name,
    id: `${opts.url}\u0000${opts.token}`,
    redis,
    script(source) {
      let s = scripts.get(source);
      if (!s) scripts.set(source, (s = redis.createScript(source)));
      return s;
    },
    async run(script, keys, args) {
      try {
        return await withDeadline(script.exec(keys, args.map(String)), opts.timeoutMs);
      } catch (e) {
        throw asStoreError(e);
      }
    },
  };
}

function asStoreError(e: unknown): StoreError {
  if (e instanceof StoreError) return e;
  const message = e instanceof Error ? e.message : String(e);
  if (e instanceof Error && (e.name === "AbortError" || e.name === "TimeoutError")) return new StoreError("timeout", message);
  if (e instanceof TypeError || /fetch|network|connect/i.test(message)) return new StoreError("unreachable", message);
  return new StoreError("error", message);
}
