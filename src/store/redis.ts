import { Redis } from "@upstash/redis/cloudflare";
import { StoreCircuit } from "./circuit.js";
import { StoreError, withDeadline } from "./deadline.js";
import { RttEstimator, type BudgetBounds } from "./rtt.js";
import { runScript, scriptFor, type Script, type ScriptSender } from "./script.js";

export type { Script } from "./script.js";
export type { BudgetBounds } from "./rtt.js";

/** One Redis database as sluice uses it: scripts only, each call bounded in time. */
export interface Store {
  readonly name: string;
  /** Same id, same database: limits of different scopes that meet in one database share one call. */
  readonly id: string;
  /** The client itself, for work off the request path (the rebalancer). */
  readonly redis: Redis;
  /**
   * Runs a Lua script and returns its raw reply: EVAL until this isolate has seen the database
   * run it, EVALSHA after. Throws `StoreError`, with reason "circuit_open" at once (no request)
   * while a decision store is being skipped after repeated failures.
   */
  run(script: Script, keys: string[], args: Array<string | number>): Promise<unknown>;
  /** The script object for a source text, one per isolate (its SHA-1 is computed once). */
  script(source: string): Script;
  /** The smoothed round trip this isolate has measured to the database (ms), or undefined before any reply. */
  roundTripMs(): number | undefined;
}

export interface StoreOptions {
  name: string;
  url: string;
  token: string;
  /**
   * How long a call may take. Bounds: the decision budget, adapted to the round trip this
   * isolate sees between them, and the store is skipped while its circuit is open. A number:
   * that fixed time, for work off the request path, which the circuit never refuses (it still
   * learns from its outcomes).
   */
  budget: BudgetBounds | number;
}

/** What this isolate knows of one database, whatever budget its callers use. */
interface Database {
  rtt: RttEstimator;
  circuit: StoreCircuit;
  /** The scripts this isolate has seen the database run. */
  loaded: Set<Script>;
}

const databases = new Map<string, Database>();
const clients = new Map<string, Redis>();

/**
 * A store for one Upstash database. Clients are kept per isolate and budget, so the HTTP
 * connection is reused across requests; the round-trip estimate, the circuit and the scripts
 * known to be loaded are kept per database.
 *
 * @example
 * const store = upstashStore({ name: "us", url, token, budget: { floorMs: 50, ceilingMs: 1000 } });
 * const reply = await store.run(store.script(decideLua), keys, args);
 */
export function upstashStore(opts: StoreOptions): Store {
  const id = `${opts.url}\u0000${opts.token}`;
  let db = databases.get(id);
  if (!db) databases.set(id, (db = { rtt: new RttEstimator(), circuit: new StoreCircuit(), loaded: new Set() }));
  const database = db;
  const bounds = opts.budget;
  const budgetMs = typeof bounds === "number" ? () => bounds : () => database.rtt.budget(bounds);
  const gated = typeof bounds !== "number";

  const clientKey = `${id}\u0000${typeof bounds === "number" ? bounds : `${bounds.floorMs}-${bounds.ceilingMs}`}`;
  let redis = clients.get(clientKey);
  if (!redis) {
    redis = new Redis({
      url: opts.url,
      token: opts.token,
      enableTelemetry: false,
      automaticDeserialization: false,
      // A retry cannot fit in a budget of tens of milliseconds: fail fast, let on_store_error decide.
      retry: { retries: 0, backoff: () => 0 },
      // A fresh timeout per HTTP request, of the store's budget at the time; a function signal
      // makes an abort throw instead of resolving to the string "Aborted".
      signal: () => AbortSignal.timeout(budgetMs()),
    });
    clients.set(clientKey, redis);
  }
  const client = redis;
  const send: ScriptSender = {
    eval: (source, keys, args) => timed(database, () => client.eval(source, keys, args)),
    evalsha: (sha, keys, args) => timed(database, () => client.evalsha(sha, keys, args)),
    evalRo: (source, keys, args) => timed(database, () => client.evalRo(source, keys, args)),
    evalshaRo: (sha, keys, args) => timed(database, () => client.evalshaRo(sha, keys, args)),
  };

  return {
    name: opts.name,
    id,
    redis: client,
    script: scriptFor,
    roundTripMs: () => database.rtt.smoothed?.srttMs,
    async run(script, keys, args) {
      const admission = gated ? database.circuit.admit(Date.now()) : "pass";
      if (admission === "refuse") {
        const left = Math.max(0, database.circuit.openUntilMs - Date.now());
        throw new StoreError("circuit_open", `Redis of "${opts.name}" skipped after repeated failures; next probe in ${left} ms`);
      }
      const ms = budgetMs();
      let gaveUp = false;
      try {
        const reply = await withDeadline(
          runScript(send, database.loaded, script, keys, args.map(String), () => gaveUp),
          ms,
        );
        database.circuit.succeeded();
        return reply;
      } catch (e) {
        const error = asStoreError(e);
        if (error.reason === "timeout") {
          gaveUp = true;
          database.rtt.timedOut(ms);
        }
        // An error reply is still an answer: the store is there.
        if (error.reason === "error") database.circuit.succeeded();
        else database.circuit.failed(Date.now(), admission === "probe");
        throw error;
      }
    },
  };
}

/** Sends one request and feeds its round trip to the estimate when an answer came back. */
async function timed<T>(db: Database, send: () => Promise<T>): Promise<T> {
  const started = Date.now();
  try {
    const reply = await send();
    db.rtt.sample(Date.now() - started);
    return reply;
  } catch (e) {
    if (asStoreError(e).reason === "error") db.rtt.sample(Date.now() - started);
    throw e;
  }
}

function asStoreError(e: unknown): StoreError {
  if (e instanceof StoreError) return e;
  const message = e instanceof Error ? e.message : String(e);
  if (e instanceof Error && (e.name === "AbortError" || e.name === "TimeoutError")) return new StoreError("timeout", message);
  if (e instanceof TypeError || /fetch|network|connect/i.test(message)) return new StoreError("unreachable", message);
  return new StoreError("error", message);
}
