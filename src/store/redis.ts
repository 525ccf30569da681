import { StoreCircuit } from "./circuit.js";
import { ScriptClock, type ClockReport } from "./clock.js";
import type { RedisClient } from "./client.js";
import {
  hashCommands,
  keyCommands,
  pipelineOn,
  streamCommands,
  type Batch,
  type Call,
  type HashCommands,
  type KeyCommands,
  type StreamCommands,
} from "./commands.js";
import { StoreError, withDeadline } from "./deadline.js";
import { restClient, type CredentialNames } from "./rest-client.js";
import { RttEstimator, type BudgetBounds } from "./rtt.js";
import { runScript, Script, type ScriptSender } from "./script.js";

export type { Script } from "./script.js";
export type { ClockMode, ClockReport } from "./clock.js";
export type { RedisClient } from "./client.js";
export type { BudgetBounds } from "./rtt.js";
export type { CredentialNames } from "./rest-client.js";
export type { Batch, HashCommands, KeyCommands, SetOptions, StreamCommands } from "./commands.js";

/**
 * One Redis database as sluice uses it: scripts, and typed commands for the structures sluice
 * keeps besides (hashes, strings, the ledger's stream), every call bounded in time and sent
 * through the database's circuit. The client itself stays in src/store/.
 */
export interface Store {
  readonly name: string;
  /** Same id, same database: limits of different scopes that meet in one database share one call. */
  readonly id: string;
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
  /** Where the database's scripts take their clock from, as this isolate knows it (clock.ts). */
  clock(): ClockReport;
  /** Strings and key lifetimes (GET, SET, GETDEL, DEL, PTTL, PEXPIRE, EXPIRE). */
  readonly keys: KeyCommands;
  /** Hashes (HGETALL, HSET, HDEL, HLEN). */
  readonly hash: HashCommands;
  /** Streams (XADD, XREVRANGE). */
  readonly stream: StreamCommands;
  /**
   * Several commands in one request (Upstash's pipeline: replies in order, not atomic), under one
   * deadline. Throws `StoreError` as `run` does, with reason "error" when a command failed.
   */
  pipeline(build: (batch: Batch) => void): Promise<unknown[]>;
  /** PING: resolves when the database answered. */
  ping(): Promise<void>;
}

/**
 * Where a database is: its REST URL and token (sluice's own REST client, rest-client.ts, talks to
 * it), or a client the caller made (an `@upstash/redis` `Redis`, used as given). `names`: the
 * Worker's variables the URL and token were read from, which a misconfigured store's errors name
 * (default: the `redis` option's `redis.url` / `redis.token`).
 */
export type RedisConnection = { url: string; token: string; names?: CredentialNames } | RedisClient;

export interface StoreOptions {
  name: string;
  connection: RedisConnection;
  /**
   * How long a call may take. Bounds: the decision budget, adapted to the round trip this
   * isolate sees between them, and the store is skipped while its circuit is open. A number:
   * that fixed time, for work off the request path, which the circuit never refuses (it still
   * learns from its outcomes; for commands, see `countsAsFailure`).
   */
  budget: BudgetBounds | number;
}

/** What this isolate knows of one database, whatever budget its callers use. */
interface Database {
  rtt: RttEstimator;
  circuit: StoreCircuit;
  /** The scripts this isolate has seen the database run. */
  loaded: Set<Script>;
  /** Redis's TIME in scripts, or the isolate's clock where the database refuses it. */
  clock: ScriptClock;
}

/**
 * What an isolate keeps of its databases between requests: clients per database and budget (so
 * the HTTP connection is reused), and per database the round-trip estimate, the circuit and the
 * scripts known to be loaded. One per `Runtime`.
 */
export class StoreRegistry {
  private readonly databases = new Map<string, Database>();
  private readonly clients = new Map<string, RedisClient>();
  private readonly scripts = new Map<string, Script>();
  /** Ids for clients handed in by the caller: the same instance is the same database. */
  private readonly given = new WeakMap<RedisClient, string>();

  /**
   * A store for one Upstash database.
   *
   * @example
   * const store = registry.store({ name: "us", connection: { url, token }, budget: { floorMs: 50, ceilingMs: 1000 } });
   * const reply = await store.run(store.script(decideLua), keys, args);
   */
  store(opts: StoreOptions): Store {
    const id = this.idOf(opts.connection);
    let db = this.databases.get(id);
    if (!db) this.databases.set(id, (db = newDatabase()));
    const database = db;
    const bounds = opts.budget;
    const budgetMs = typeof bounds === "number" ? () => bounds : () => database.rtt.budget(bounds);
    const client = this.clientFor(id, opts.connection, bounds, budgetMs);
    return storeOf(opts.name, id, client, database, typeof bounds !== "number", budgetMs, (source) =>
      this.script(source),
    );
  }

  /** The one `Script` of this isolate for a source text (its SHA-1 computed once). */
  script(source: string): Script {
    let s = this.scripts.get(source);
    if (!s) this.scripts.set(source, (s = new Script(source)));
    return s;
  }

  private idOf(connection: RedisConnection): string {
    if (isCredentials(connection)) return `${connection.url}\u0000${connection.token}`;
    let id = this.given.get(connection);
    if (!id) this.given.set(connection, (id = `client:${crypto.randomUUID()}`));
    return id;
  }

  private clientFor(
    id: string,
    connection: RedisConnection,
    bounds: BudgetBounds | number,
    budgetMs: () => number,
  ): RedisClient {
    // a caller's own client keeps its own settings; the deadline around each call still bounds it
    if (!isCredentials(connection)) return connection;
    const clientKey = `${id}\u0000${typeof bounds === "number" ? bounds : `${bounds.floorMs}-${bounds.ceilingMs}`}`;
    let client = this.clients.get(clientKey);
    if (!client) {
      // A fresh timeout per HTTP request, of the store's budget at the time (rest-client.ts: no
      // retries, raw replies, an abort rejects).
      client = restClient({
        url: connection.url,
        token: connection.token,
        timeoutMs: budgetMs,
        names: connection.names,
      });
      this.clients.set(clientKey, client);
    }
    return client;
  }
}

function newDatabase(): Database {
  return { rtt: new RttEstimator(), circuit: new StoreCircuit(), loaded: new Set(), clock: new ScriptClock() };
}

/** A URL and token, not a client (a caller's client is known by its methods: no `instanceof` of a class sluice does not import). */
function isCredentials(c: RedisConnection): c is { url: string; token: string; names?: CredentialNames } {
  const fields = c as { url?: unknown; token?: unknown; eval?: unknown };
  return typeof fields.url === "string" && typeof fields.token === "string" && typeof fields.eval !== "function";
}

/** How a store reaches its database: the client, the budget of a call, and whether the circuit may refuse it. */
interface Line {
  name: string;
  client: RedisClient;
  database: Database;
  gated: boolean;
  budgetMs: () => number;
}

function storeOf(
  name: string,
  id: string,
  client: RedisClient,
  database: Database,
  gated: boolean,
  budgetMs: () => number,
  script: (source: string) => Script,
): Store {
  const line: Line = { name, client, database, gated, budgetMs };
  const call: Call = (send) => guarded(line, "command", () => send(client));
  return {
    name,
    id,
    script,
    roundTripMs: () => database.rtt.smoothed?.srttMs,
    clock: () => database.clock.report(),
    run: (s, keys, args) => runOn(line, s, keys, args),
    keys: keyCommands(call),
    hash: hashCommands(call),
    stream: streamCommands(call),
    pipeline: (build) => pipelineOn(call, build),
    ping: () => call((c) => c.ping()).then(() => undefined),
  };
}

/**
 * The one way sluice runs a Lua script: through the runner (`guarded`), EVAL or EVALSHA as the
 * database has seen the script, each request feeding the round-trip estimate.
 */
function runOn(line: Line, script: Script, keys: string[], args: Array<string | number>): Promise<unknown> {
  const { database, client } = line;
  const send: ScriptSender = {
    eval: (source, k, a) => timed(database, () => client.eval(source, k, a)),
    evalsha: (sha, k, a) => timed(database, () => client.evalsha(sha, k, a)),
    evalRo: (source, k, a) => timed(database, () => client.evalRo(source, k, a)),
    evalshaRo: (sha, k, a) => timed(database, () => client.evalshaRo(sha, k, a)),
  };
  const clock = { clock: database.clock, store: line.name };
  return guarded(line, "script", (abandoned) =>
    runScript(send, database.loaded, script, keys, args.map(String), abandoned, clock),
  );
}

/**
 * The runner, for scripts and commands alike: through the database's circuit (refused at once
 * while it is open, for decision stores), within the call's budget, feeding the circuit with the
 * outcome. `abandoned` tells the work whether the runner gave up on it already.
 */
async function guarded<T>(line: Line, kind: CallKind, work: (abandoned: () => boolean) => Promise<T>): Promise<T> {
  const { database } = line;
  const admission = line.gated ? database.circuit.admit(Date.now()) : "pass";
  if (admission === "refuse") {
    const left = Math.max(0, database.circuit.openUntilMs - Date.now());
    throw new StoreError(
      "circuit_open",
      `Redis of "${line.name}" skipped after repeated failures; next probe in ${left} ms`,
    );
  }
  const ms = line.budgetMs();
  let gaveUp = false;
  try {
    const reply = await withDeadline(
      work(() => gaveUp),
      ms,
    );
    database.circuit.succeeded();
    return reply;
  } catch (e) {
    const error = asStoreError(e);
    if (error.reason === "timeout") gaveUp = true;
    // the round-trip estimate is the scripts': a command's budget and size are not a decision's
    if (error.reason === "timeout" && kind === "script") database.rtt.timedOut(ms);
    // An error reply is still an answer: the store is there. A misconfigured store is no outage:
    // an open circuit would turn its loud error into on_store_error's quiet one.
    if (error.reason === "error" || error.reason === "misconfigured") database.circuit.succeeded();
    // a probe's failure always counts, whatever made it: else the circuit would wait for a lost probe
    else if (countsAsFailure(kind) || admission === "probe") database.circuit.failed(Date.now(), admission === "probe");
    throw error;
  }
}

/** A script (a decision, a settlement) or one of the typed commands. */
type CallKind = "script" | "command";

/**
 * Whether a failed call counts towards opening the circuit, which refuses decisions: a script's
 * failure does (decisions, settlements: as they always have); a command's never does. Commands
 * are background and operator work (lists and overrides refreshes, metrics flushes, the admin API,
 * the queue consumer, the rebalancer) with budgets and sizes that are not a decision's, and they
 * run in bursts while a store is down: counted, they would keep the circuit open after the store
 * is back and delay the decisions' return. A command on a decision store is still refused while
 * the circuit is open, and any answer closes it: the database is there.
 */
function countsAsFailure(kind: CallKind): boolean {
  return kind === "script";
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
  if (e instanceof Error && (e.name === "AbortError" || e.name === "TimeoutError"))
    return new StoreError("timeout", message);
  if (e instanceof TypeError || /fetch|network|connect/i.test(message)) return new StoreError("unreachable", message);
  return new StoreError("error", message);
}
