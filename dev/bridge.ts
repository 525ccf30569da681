/**
 * The Upstash REST protocol (see shared/notes/upstash-rest.md) in front of a real redis-server,
 * so @upstash/redis, Miniflare and the tests talk to a local Redis exactly as to Upstash.
 * It can also play a Redis that is far away, hung or gone (latency and `BridgeMode`, switched
 * from code or over HTTP at `/__bridge/delay`), one that refuses `TIME` inside scripts
 * (`ScriptTime`), or one that loses chosen requests (`dropNext`, from code), and counts what it
 * receives (`counts()`), so tests and the bench can put a number on every Redis request a
 * decision makes.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { type RespArg, RespClient, RespError, type RespReply } from "./resp.js";

export type BridgeOptions = {
  redisUrl: string;
  token: string;
  port?: number;
  host?: string;
  /** Added to every round trip (half before Redis runs the command, half after): plays a Redis that is far away. */
  latencyMs?: number;
  /** How the bridge starts; see `BridgeMode`. */
  mode?: BridgeMode;
  /** Whether scripts may call TIME ("allow", the default); see `ScriptTime`. */
  scriptTime?: ScriptTime;
};

/**
 * normal: answers (after the latency); hang: reads each Redis request and never answers it (a
 * Redis that stopped responding); refuse: drops the connection of each Redis request unanswered,
 * so the client's fetch fails at once (a Redis that is gone). The control endpoint
 * (`/__bridge/...`) answers in every mode, so a test can always switch back.
 */
export type BridgeMode = "normal" | "hang" | "refuse";

/**
 * allow: scripts run as sent. refuse: a script's `redis.call('TIME')` (or `pcall`, any case or
 * quotes) fails as on a Redis that refuses TIME in scripts, ElastiCache Serverless for one:
 * "ERR This Redis command is not allowed from script script: <sha>, on @user_script:<line>.".
 * The bridge rewrites the call, on its line, into one of a command stock Redis refuses in scripts
 * (MULTI), so the real Redis raises that very error at that very line; the SHA in the message is
 * the one the client sent. Everything else in the script runs as sent.
 */
export type ScriptTime = "allow" | "refuse";

/** The fault the bridge plays right now. */
export interface BridgeFault {
  mode: BridgeMode;
  latencyMs: number;
}

/**
 * Which requests `dropNext` loses: those carrying a command `match` accepts (its name and
 * arguments as text, e.g. `["EVALSHA", sha, "3", k1, k2, k3, "complete", …]`), the next `times`
 * of them (1 by default), `before` Redis runs it (a write lost on its way, the default) or `after`
 * (it ran, its reply is lost). Either way the client sees its connection reset.
 */
export interface DropRule {
  match: (command: string[]) => boolean;
  times?: number;
  when?: "before" | "after";
}

/** What the bridge has received since it started (control requests not included). */
export interface BridgeCounts {
  /** HTTP requests for Redis, whatever became of them. */
  requests: number;
  /** Of those, dropped unanswered in refuse mode. */
  refused: number;
  /** Of those, left unanswered in hang mode. */
  hung: number;
  /** Redis commands, by lower-case name; each command of a pipeline or transaction counts. */
  commands: Record<string, number>;
  /** HTTP requests that carried at least one command of that name. */
  requestsWith: Record<string, number>;
  /**
   * Script calls (EVAL, EVALSHA and their `_ro` forms) by their first argument: decide.lua's mode
   * (`take`, `lease`, `return` …), access-lists.lua's operation (`read` …), so that a test can tell
   * one script's calls from another's.
   */
  scripts: Record<string, number>;
}

export type Bridge = {
  /** http://127.0.0.1:PORT */
  url: string;
  port: number;
  setLatency(ms: number): void;
  setMode(mode: BridgeMode): void;
  /** Scripts may call TIME, or meet the refusal of a Redis that refuses it (`ScriptTime`). */
  setScriptTime(time: ScriptTime): void;
  readonly scriptTime: ScriptTime;
  /** Loses the next requests a rule matches (see `DropRule`); rules add up, each used up by its `times`. */
  dropNext(rule: DropRule): void;
  readonly fault: BridgeFault;
  /** HTTP requests for Redis received since start (`counts().requests`). */
  readonly requests: number;
  /** A snapshot of the counters: take one before and one after, and compare. */
  counts(): BridgeCounts;
  close(): Promise<void>;
};

/** Where the bridge's own switch and counters live; never forwarded to Redis. */
export const CONTROL_PREFIX = "/__bridge/";

/** The longest latency the switch accepts: ten minutes is already no answer at all. */
const MAX_LATENCY_MS = 600_000;

const MAX_BODY_BYTES = 10 * 1024 * 1024;

/**
 * Commands that would change the state of the one shared Redis connection (a stray MULTI, SELECT,
 * HELLO 3, SUBSCRIBE) or park it (blocking pops) would corrupt or stall every other request.
 * Upstash runs each request on its own; here they are refused instead.
 */
const REFUSED = new Set([
  "multi",
  "exec",
  "discard",
  "watch",
  "unwatch",
  "select",
  "hello",
  "auth",
  "reset",
  "quit",
  "client",
  "subscribe",
  "psubscribe",
  "ssubscribe",
  "unsubscribe",
  "punsubscribe",
  "sunsubscribe",
  "monitor",
  "sync",
  "psync",
  "blpop",
  "brpop",
  "brpoplpush",
  "blmove",
  "blmpop",
  "bzpopmin",
  "bzpopmax",
  "bzmpop",
  "wait",
  "waitaof",
  "shutdown",
]);

/** HTTP-level failures: status plus the JSON error. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Starts the bridge on 127.0.0.1 (a free port unless one is given).
 *
 * @example const bridge = await startBridge({ redisUrl: redis.url, token: "dev-token" });
 */
export async function startBridge(opts: BridgeOptions): Promise<Bridge> {
  const state = new BridgeState(opts);
  const server = createServer((req, res) => state.handle(req, res));
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    setLatency(ms: number) {
      state.fault.latencyMs = checkedLatency(ms);
    },
    setMode: (mode) => state.setMode(mode),
    setScriptTime: (time) => void (state.scriptTime = checkedScriptTime(time)),
    get scriptTime() {
      return state.scriptTime;
    },
    dropNext: (rule) => state.drops.push({ ...rule, left: rule.times ?? 1 }),
    get fault() {
      return { ...state.fault };
    },
    get requests() {
      return state.counts.requests;
    },
    counts: () => snapshot(state.counts),
    close: () =>
      new Promise<void>((resolve) => {
        state.dropParked();
        state.redis.close();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

type Answer = { status: number; body: unknown };

/** One bridge's connection to Redis, its switch, its counters and the requests it has parked. */
class BridgeState {
  readonly redis: RespClient;
  readonly fault: BridgeFault;
  scriptTime: ScriptTime;
  readonly counts: BridgeCounts = { requests: 0, refused: 0, hung: 0, commands: {}, requestsWith: {}, scripts: {} };
  readonly drops: Array<DropRule & { left: number }> = [];
  private readonly scripts = new ScriptShas();
  private readonly expectedAuth: Buffer;
  /** Requests parked in hang mode, each with the function that drops it. */
  private readonly parked = new Set<() => void>();
  private syncToken = 0;

  constructor(opts: BridgeOptions) {
    this.redis = RespClient.fromUrl(opts.redisUrl);
    this.expectedAuth = digest(`Bearer ${opts.token}`);
    this.fault = { mode: opts.mode ?? "normal", latencyMs: checkedLatency(opts.latencyMs ?? 0) };
    this.scriptTime = checkedScriptTime(opts.scriptTime ?? "allow");
  }

  setMode(mode: BridgeMode): void {
    this.fault.mode = mode;
    // Out of hang mode the parked requests are dropped, not answered late: the client gave up on
    // them long ago, and a late answer would run commands nobody waits for any more.
    if (mode !== "hang") this.dropParked();
  }

  dropParked(): void {
    for (const drop of [...this.parked]) drop();
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    const isControl = pathOf(req).startsWith(CONTROL_PREFIX);
    if (!isControl) this.counts.requests++;
    if (!isControl && this.fault.mode === "refuse") {
      // Dropped before anything is read: to the client, a connection that died at once.
      this.counts.refused++;
      req.socket.destroy();
      return;
    }
    // the second half of the latency, on the way back (none for the switch itself)
    const back = () => (isControl ? 0 : this.fault.latencyMs - Math.floor(this.fault.latencyMs / 2));
    (isControl ? this.control(req) : this.answer(req, res))
      .then(
        ({ status, body }) => this.respond(res, status, body, back()),
        (error: unknown) => {
          if (error instanceof Dropped) return void req.socket.destroy();
          if (error instanceof HttpError) return this.respond(res, error.status, { error: error.message }, back());
          // Anything else is Redis being unreachable or broken: report it, keep serving.
          const reason = error instanceof Error ? error.message : String(error);
          this.respond(res, 500, { error: `ERR bridge could not reach Redis: ${reason}` }, back());
        },
      )
      .catch(() => res.destroy());
  }

  private authorise(req: IncomingMessage): void {
    // Hash both sides so timingSafeEqual always sees equal lengths and the length does not leak.
    if (!timingSafeEqual(digest(req.headers.authorization ?? ""), this.expectedAuth))
      throw new HttpError(401, "Unauthorized");
  }

  private record(commands: RespArg[][]): void {
    const names = commands.map((c) => String(c[0]).toLowerCase());
    for (const name of names) this.counts.commands[name] = (this.counts.commands[name] ?? 0) + 1;
    for (const name of new Set(names)) this.counts.requestsWith[name] = (this.counts.requestsWith[name] ?? 0) + 1;
    for (const c of commands) {
      if (!/^eval/i.test(String(c[0]))) continue;
      // EVAL|EVALSHA script numkeys key… arg…
      const first = String(c[3 + Number(c[2])] ?? "");
      this.counts.scripts[first] = (this.counts.scripts[first] ?? 0) + 1;
    }
  }

  /** Resolves never, until the mode leaves hang: then rejects, and the request is dropped. */
  private hang(res: ServerResponse): Promise<never> {
    this.counts.hung++;
    return new Promise<never>((_, reject) => {
      const drop = () => {
        this.parked.delete(drop);
        reject(new Dropped());
      };
      this.parked.add(drop);
      res.once("close", drop); // the client gave up first
    });
  }

  private async answer(req: IncomingMessage, res: ServerResponse): Promise<Answer> {
    await pause(Math.floor(this.fault.latencyMs / 2)); // on the way to Redis
    if (req.method !== "POST") throw new HttpError(405, "ERR only POST is supported");
    this.authorise(req);
    const path = pathOf(req);
    if (path !== "" && path !== "/pipeline" && path !== "/multi-exec")
      throw new HttpError(404, `ERR unknown endpoint ${path}`);
    const body = parseJson(await readBody(req));
    const encode = String(req.headers["upstash-encoding"] ?? "").toLowerCase() === "base64" ? toBase64Json : toTextJson;
    const commands = path === "" ? [toCommand(body)] : toCommandList(body);
    this.record(commands);
    if (this.fault.mode === "hang") await this.hang(res);
    if (this.fault.mode === "refuse") {
      this.counts.refused++;
      throw new Dropped();
    }
    this.syncToken++; // moves on every parsed request, writes included
    const drop = this.dropFor(commands);
    if (drop === "before") throw new Dropped();
    const answer = await (path === "" ? this.single(commands[0] ?? [], encode) : this.many(path, commands, encode));
    if (drop === "after") throw new Dropped();
    return answer;
  }

  /** Whether a `dropNext` rule takes this request, and when; a rule used up is removed. */
  private dropFor(commands: RespArg[][]): "before" | "after" | undefined {
    const texts = commands.map((c) => c.map((arg) => arg.toString()));
    const i = this.drops.findIndex((rule) => texts.some((c) => rule.match(c)));
    const rule = this.drops[i];
    if (!rule) return undefined;
    if (--rule.left <= 0) this.drops.splice(i, 1);
    return rule.when ?? "before";
  }

  private async single(command: RespArg[], encode: (reply: RespReply) => unknown): Promise<Answer> {
    const reply = await this.redis.send(this.scripts.translate(command, this.scriptTime));
    if (reply instanceof RespError) return { status: 400, body: { error: this.scripts.error(reply.message) } };
    return { status: 200, body: { result: encode(this.scripts.answer(command, reply)) } };
  }

  private async many(path: string, commands: RespArg[][], encode: (reply: RespReply) => unknown): Promise<Answer> {
    const translated = commands.map((c) => this.scripts.translate(c, this.scriptTime));
    const replies =
      path === "/pipeline" ? await this.redis.sendMany(translated) : await transaction(this.redis, translated);
    return {
      status: 200,
      body: replies.map((reply, i) =>
        reply instanceof RespError
          ? { error: this.scripts.error(reply.message) }
          : { result: encode(this.scripts.answer(commands[i] ?? [], reply)) },
      ),
    };
  }

  /**
   * `/__bridge/delay` (GET reads, POST sets `{ "ms": 80 }` and/or `{ "mode": "hang" }`),
   * `/__bridge/script-time` (GET reads, POST sets `{ "time": "refuse" }` or `"allow"`) and `/__bridge/counts`.
   */
  private async control(req: IncomingMessage): Promise<Answer> {
    this.authorise(req);
    const what = pathOf(req).slice(CONTROL_PREFIX.length);
    if (what === "counts" && req.method === "GET") return { status: 200, body: { result: snapshot(this.counts) } };
    if (what === "script-time") return this.scriptTimeSwitch(req);
    if (what !== "delay") throw new HttpError(404, `ERR unknown control endpoint ${pathOf(req)}`);
    if (req.method === "POST") {
      const change = toFaultChange(parseJson(await readBody(req)));
      if (change.latencyMs !== undefined) this.fault.latencyMs = change.latencyMs;
      if (change.mode !== undefined) this.setMode(change.mode);
    } else if (req.method !== "GET") {
      throw new HttpError(405, "ERR GET or POST");
    }
    return { status: 200, body: { result: { mode: this.fault.mode, ms: this.fault.latencyMs } } };
  }

  /** `/__bridge/script-time`: GET reads, POST `{ "time": "allow" | "refuse" }` sets (`ScriptTime`). */
  private async scriptTimeSwitch(req: IncomingMessage): Promise<Answer> {
    if (req.method === "POST") {
      const { time, ...rest } = (parseJson(await readBody(req)) ?? {}) as Record<string, unknown>;
      if (Object.keys(rest).length > 0 || !SCRIPT_TIMES.includes(time as ScriptTime))
        throw new HttpError(400, `ERR expected { "time": ${SCRIPT_TIMES.map((t) => `"${t}"`).join(" | ")} }`);
      this.scriptTime = time as ScriptTime;
    } else if (req.method !== "GET") {
      throw new HttpError(405, "ERR GET or POST");
    }
    return { status: 200, body: { result: { time: this.scriptTime } } };
  }

  private respond(res: ServerResponse, status: number, body: unknown, delayMs: number): void {
    const send = () => {
      if (res.destroyed) return;
      res.writeHead(status, {
        "content-type": "application/json",
        // Read-your-writes is trivial with one Redis; the token only has to be present and move on writes.
        "upstash-sync-token": `bridge-${this.syncToken}`,
      });
      res.end(JSON.stringify(body));
    };
    if (delayMs > 0) setTimeout(send, delayMs);
    else send();
  }
}

/** A request the bridge drops without an answer (refuse mode, or parked in hang mode). */
class Dropped extends Error {}

const pause = (ms: number) => (ms > 0 ? new Promise<void>((resolve) => setTimeout(resolve, ms)) : Promise.resolve());

const pathOf = (req: IncomingMessage): string => (req.url ?? "/").split("?")[0]?.replace(/\/+$/, "") ?? "";

function snapshot(c: BridgeCounts): BridgeCounts {
  return { ...c, commands: { ...c.commands }, requestsWith: { ...c.requestsWith }, scripts: { ...c.scripts } };
}

function checkedLatency(ms: number): number {
  if (!Number.isInteger(ms) || ms < 0 || ms > MAX_LATENCY_MS)
    throw new RangeError(`latency must be a whole number of ms from 0 to ${MAX_LATENCY_MS}, got ${ms}`);
  return ms;
}

const MODES: readonly BridgeMode[] = ["normal", "hang", "refuse"];
const SCRIPT_TIMES: readonly ScriptTime[] = ["allow", "refuse"];

function checkedScriptTime(time: ScriptTime): ScriptTime {
  if (!SCRIPT_TIMES.includes(time)) throw new RangeError(`scriptTime must be "allow" or "refuse", got ${String(time)}`);
  return time;
}

/** The body of `POST /__bridge/delay`: `{ "ms": 80 }`, `{ "mode": "hang" }`, or both. */
function toFaultChange(value: unknown): { latencyMs?: number; mode?: BridgeMode } {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new HttpError(400, 'ERR expected { "ms": n } and/or { "mode": "normal" | "hang" | "refuse" }');
  const { ms, mode, ...rest } = value as Record<string, unknown>;
  if (Object.keys(rest).length > 0)
    throw new HttpError(400, `ERR unknown field ${Object.keys(rest)[0]}: only ms and mode`);
  if (ms === undefined && mode === undefined) throw new HttpError(400, "ERR nothing to change: give ms and/or mode");
  if (ms !== undefined && (typeof ms !== "number" || !Number.isInteger(ms) || ms < 0 || ms > MAX_LATENCY_MS)) {
    throw new HttpError(400, `ERR ms must be a whole number from 0 to ${MAX_LATENCY_MS}`);
  }
  if (mode !== undefined && !MODES.includes(mode as BridgeMode))
    throw new HttpError(400, `ERR mode must be one of ${MODES.join(", ")}`);
  return { latencyMs: ms as number | undefined, mode: mode as BridgeMode | undefined };
}

/**
 * MULTI, the commands and EXEC leave in one write, so nothing from other requests can land
 * inside the transaction on the shared connection.
 */
async function transaction(redis: RespClient, commands: RespArg[][]): Promise<RespReply[]> {
  const replies = await redis.sendMany([["MULTI"], ...commands, ["EXEC"]]);
  const queued = replies.slice(1, -1);
  const exec = replies[replies.length - 1] ?? null;
  // A command refused while queueing aborts the whole transaction: that one gets its own error.
  if (exec instanceof RespError) return queued.map((q) => (q instanceof RespError ? q : exec));
  if (!Array.isArray(exec)) return commands.map(() => new RespError("ERR transaction aborted"));
  return exec;
}

/** Drains the body even past the limit, so the client reads a 413 instead of a reset connection. */
async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const bytes = chunk as Buffer;
    size += bytes.length;
    if (size <= MAX_BODY_BYTES) chunks.push(bytes);
  }
  if (size > MAX_BODY_BYTES) throw new HttpError(413, `ERR request body larger than ${MAX_BODY_BYTES} bytes`);
  return Buffer.concat(chunks);
}

function parseJson(raw: Buffer): unknown {
  try {
    return JSON.parse(raw.toString("utf8")) as unknown;
  } catch {
    throw new HttpError(400, "ERR failed to parse command: body is not valid JSON");
  }
}

/**
 * One command from its JSON form. Strings are UTF-8, numbers their decimal text, and booleans
 * "true"/"false" as Upstash and SRH store them (so `set(k, true)` reads back as `true`).
 */
function toCommand(value: unknown): RespArg[] {
  if (!Array.isArray(value) || value.length === 0) throw new HttpError(400, "ERR a command is a non-empty JSON array");
  const args = value.map((arg: unknown): RespArg => {
    if (typeof arg === "string") return arg;
    if (typeof arg === "number" && Number.isFinite(arg)) return String(arg);
    if (typeof arg === "boolean") return arg ? "true" : "false";
    throw new HttpError(400, `ERR unsupported argument ${JSON.stringify(arg)}: only strings, numbers and booleans`);
  });
  const name = String(args[0]).toLowerCase();
  if (REFUSED.has(name)) throw new HttpError(400, `ERR command '${name}' is not supported by the REST bridge`);
  return args;
}

function toCommandList(value: unknown): RespArg[][] {
  if (!Array.isArray(value) || value.length === 0)
    throw new HttpError(400, "ERR expected a non-empty JSON array of commands");
  return value.map(toCommand);
}

/** With `Upstash-Encoding: base64`, every string at every depth is base64 (status replies too). */
function toBase64Json(reply: RespReply): unknown {
  if (reply === null || typeof reply === "number") return reply;
  if (reply instanceof RespError) return reply.message; // errors are never encoded
  if (Array.isArray(reply)) return reply.map(toBase64Json);
  return reply.toString("base64");
}

function toTextJson(reply: RespReply): unknown {
  if (reply === null || typeof reply === "number") return reply;
  if (reply instanceof RespError) return reply.message;
  if (Array.isArray(reply)) return reply.map(toTextJson);
  return reply.toString("utf8");
}

const digest = (text: string): Buffer => createHash("sha256").update(text, "utf8").digest();
const sha1 = (text: string): string => createHash("sha1").update(text, "utf8").digest("hex");

/** The shebang flags stock Redis 7 accepts; Upstash adds its own (allow-key-locking). */
const REDIS_FLAGS = new Set(["no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"]);

/** Drops the flags Redis would reject; undefined when the script needs no change. */
export function stripUnknownFlags(source: string): string | undefined {
  const match = /^#!lua[ \t]+flags=([^\s]*)[^\r\n]*/.exec(source);
  if (match === null) return undefined;
  const flags = (match[1] ?? "").split(",").filter((flag) => flag !== "");
  const kept = flags.filter((flag) => REDIS_FLAGS.has(flag));
  if (kept.length === flags.length) return undefined;
  const shebang = kept.length > 0 ? `#!lua flags=${kept.join(",")}` : "#!lua";
  return shebang + source.slice(match[0].length);
}

/** A SHA no script has: EVALSHA of it is Redis's own NOSCRIPT. */
const NO_SUCH_SHA = "0".repeat(40);

/** Each `redis.call('TIME')` (or `pcall`, any case or quotes) as the same call of MULTI, which Redis refuses in scripts. */
export function refuseTime(source: string): string {
  return source.replace(/redis\.(p?call)\(\s*(['"])time\2\s*\)/gi, "redis.$1($2MULTI$2)");
}

/**
 * Scripts as Upstash runs them: a script whose shebang carries Upstash-only flags is stored
 * stripped, yet EVALSHA keeps answering to the SHA-1 the client computed from what it sent.
 * An unknown SHA passes through untouched, so Redis's NOSCRIPT reaches the client, which then
 * falls back to EVAL. While scripts may not call TIME (`ScriptTime`), they are stored with the
 * call rewritten (`refuseTime`) under SHAs of their own, and a SHA the bridge has not rewritten
 * is Redis's NOSCRIPT (the client's body comes next, and is rewritten), never the script as sent.
 * Errors name the script by the SHA the client sent.
 */
class ScriptShas {
  /** Per `ScriptTime`: the SHA the client sent → the SHA of what Redis holds. */
  private readonly redisShas: Record<ScriptTime, Map<string, string>> = { allow: new Map(), refuse: new Map() };
  /** What Redis holds → the SHA the client sent, for error messages. */
  private readonly clientShas = new Map<string, string>();

  translate(command: RespArg[], time: ScriptTime): RespArg[] {
    const [name = "", first = "", ...rest] = command;
    const lower = String(name).toLowerCase();
    const sub = String(first).toLowerCase();
    if ((lower === "eval" || lower === "eval_ro") && command.length > 1)
      return [name, this.prepare(String(first), time), ...rest];
    if ((lower === "evalsha" || lower === "evalsha_ro") && command.length > 1)
      return [name, this.redisSha(first, time), ...rest];
    if (lower === "script" && sub === "load" && rest.length > 0)
      return [name, first, this.prepare(String(rest[0]), time), ...rest.slice(1)];
    if (lower === "script" && sub === "exists") return [name, first, ...rest.map((sha) => this.redisSha(sha, time))];
    return command;
  }

  /** SCRIPT LOAD answers with the SHA-1 of the script as sent, not of its stripped copy. */
  answer(command: RespArg[], reply: RespReply): RespReply {
    const [name, sub, source] = command;
    const isLoad = String(name).toLowerCase() === "script" && String(sub).toLowerCase() === "load";
    return isLoad && source !== undefined && Buffer.isBuffer(reply) ? Buffer.from(sha1(String(source))) : reply;
  }

  /** An error reply, naming the script ("script: <sha>") by the SHA the client sent. */
  error(message: string): string {
    return message.replace(/\bscript: ([0-9a-f]{40})\b/g, (whole, sha: string) => {
      const sent = this.clientShas.get(sha);
      return sent ? `script: ${sent}` : whole;
    });
  }

  /** The SHA under which Redis holds the script the client calls `sha`. */
  private redisSha(sha: RespArg, time: ScriptTime): RespArg {
    const held = this.redisShas[time].get(String(sha).toLowerCase());
    if (held) return held;
    return time === "refuse" ? NO_SUCH_SHA : sha;
  }

  /** What Redis is sent for `source`: flags it would reject dropped, and TIME refused when it is. */
  private prepare(source: string, time: ScriptTime): string {
    const stripped = stripUnknownFlags(source) ?? source;
    const prepared = time === "refuse" ? refuseTime(stripped) : stripped;
    const sent = sha1(source);
    const held = sha1(prepared);
    this.redisShas[time].set(sent, held);
    if (held !== sent) this.clientShas.set(held, sent);
    return prepared;
  }
}
