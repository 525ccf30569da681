/**
 * A counting pass-through in front of an Upstash-REST bridge: the Worker is given the tap's URL
 * instead of the bridge's, and every HTTP request is forwarded unchanged while the tap reads which
 * Redis commands it carries. A request carrying a script call (EVALSHA/EVAL of decide.lua) is a
 * *decision* request; anything else (the metrics flush, the deny/allow lists refresh) is counted
 * as *other*, by command. So "one Redis request per decision" is checked per request, not inferred.
 * A decision request is also counted under the route its buckets belong to (the `{route}` part of
 * the `{key_prefix}:{route}:...` keys the script call names), so clients of different routes can
 * share a Worker and still be told apart.
 */
import { Agent, createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Cleanup } from "./stack.js";

const SCRIPT_CALLS = new Set(["evalsha", "eval", "evalsha_ro", "eval_ro"]);

export interface TapCounts {
  /** HTTP requests that carried at least one script call. */
  decision: number;
  /** HTTP requests without one. */
  other: number;
  /** Commands of the `other` requests, lower case → count. */
  otherCommands: Record<string, number>;
  /** Requests whose body the tap could not read as Upstash REST (forwarded all the same). */
  unreadable: number;
  /** Decision requests by the route named in their keys (a request naming two routes counts for each). */
  decisionByRoute: Record<string, number>;
  /**
   * Every request by kind: a script call's by its mode (decide.lua's ARGV[1]: `take`, `release`,
   * `settle`, ...; a request carrying two modes counts for each), any other by its distinct
   * commands, sorted and joined by `+` (`hgetall`, `incr+pexpire`).
   */
  byKind: Record<string, number>;
}

export interface Tap {
  url: string;
  /** A copy of the counts so far. */
  counts(): TapCounts;
  close(): Promise<void>;
}

/** Difference of two snapshots. */
export function tapDelta(before: TapCounts, after: TapCounts): TapCounts {
  const diff = (a: Record<string, number>, b: Record<string, number>) => {
    const out: Record<string, number> = {};
    for (const [c, n] of Object.entries(a)) {
      const d = n - (b[c] ?? 0);
      if (d !== 0) out[c] = d;
    }
    return out;
  };
  return {
    decision: after.decision - before.decision,
    other: after.other - before.other,
    otherCommands: diff(after.otherCommands, before.otherCommands),
    unreadable: after.unreadable - before.unreadable,
    decisionByRoute: diff(after.decisionByRoute, before.decisionByRoute),
    byKind: diff(after.byKind, before.byKind),
  };
}

/** Counts with nothing in them. */
export function emptyTapCounts(): TapCounts {
  return { decision: 0, other: 0, otherCommands: {}, unreadable: 0, decisionByRoute: {}, byKind: {} };
}

export async function startTap(target: string, cleanup: Cleanup, label: string): Promise<Tap> {
  const upstream = new URL(target);
  const agent = new Agent({ keepAlive: true });
  const counts = emptyTapCounts();
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("error", () => res.destroy());
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      record(counts, (req.url ?? "/").split("?")[0] ?? "/", body);
      forward(req, res, body, upstream, agent);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
      agent.destroy();
    });
  cleanup.add(`tap ${label}`, close);
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    counts: () => ({
      ...counts,
      otherCommands: { ...counts.otherCommands },
      decisionByRoute: { ...counts.decisionByRoute },
      byKind: { ...counts.byKind },
    }),
    close,
  };
}

/** Counts one request: a decision request (it carries a script call) by route, any other by command. */
function record(counts: TapCounts, path: string, body: Buffer): void {
  const commands = commandsOf(path, body);
  if (commands === undefined) {
    counts.unreadable++;
    counts.other++;
    return;
  }
  const scripts = commands.filter((c) => SCRIPT_CALLS.has(c.name));
  for (const kind of kindsOf(commands, scripts)) counts.byKind[kind] = (counts.byKind[kind] ?? 0) + 1;
  if (scripts.length > 0) {
    counts.decision++;
    for (const route of new Set(scripts.flatMap(routesOf)))
      counts.decisionByRoute[route] = (counts.decisionByRoute[route] ?? 0) + 1;
    return;
  }
  counts.other++;
  for (const c of commands) counts.otherCommands[c.name] = (counts.otherCommands[c.name] ?? 0) + 1;
}

/** Sends the request on to the bridge unchanged and pipes its answer back (502 if the bridge is gone). */
function forward(req: IncomingMessage, res: ServerResponse, body: Buffer, upstream: URL, agent: Agent): void {
  const headers = { ...req.headers, host: upstream.host, "content-length": String(body.length) };
  delete headers.connection;
  const out = httpRequest(
    { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers, agent },
    (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    },
  );
  out.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: `ERR bench tap: ${e.message}` }));
  });
  out.end(body);
}

interface Command {
  /** Lower case. */
  name: string;
  args: unknown[];
}

/** The commands of one Upstash REST body: `/` one command, `/pipeline` and `/multi-exec` a list. */
function commandsOf(path: string, body: Buffer): Command[] | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString("utf8"));
  } catch {
    return undefined;
  }
  if (!Array.isArray(parsed)) return undefined;
  const command = (c: unknown): Command | undefined =>
    Array.isArray(c) && c.length > 0 ? { name: String(c[0]).toLowerCase(), args: c.slice(1) } : undefined;
  const trimmed = path.replace(/\/+$/, "");
  const commands = trimmed === "/pipeline" || trimmed === "/multi-exec" ? parsed.map(command) : [command(parsed)];
  return commands.every((c): c is Command => c !== undefined) ? commands : undefined;
}

/**
 * The `{route}` part of the keys a script call names: EVAL(SHA) script-or-sha numkeys key...; the
 * deployment-wide keys (`{prefix}:version`, two parts) name no route.
 */
function routesOf(c: Command): string[] {
  const n = Number(c.args[1]);
  if (!Number.isInteger(n) || n < 1) return [];
  return c.args
    .slice(2, 2 + n)
    .map((k) => String(k).split(":"))
    .filter((parts) => parts.length > 2)
    .map((parts) => parts[1] ?? "")
    .filter((r) => r !== "");
}

/** A request's kinds (see `TapCounts.byKind`). */
function kindsOf(commands: Command[], scripts: Command[]): Set<string> {
  if (scripts.length === 0) return new Set([[...new Set(commands.map((c) => c.name))].sort().join("+")]);
  return new Set(scripts.map(modeOf));
}

/** decide.lua's mode, ARGV[1] of EVAL(SHA) script-or-sha numkeys key... arg...; "?" when unreadable. */
function modeOf(c: Command): string {
  const n = Number(c.args[1]);
  return Number.isInteger(n) && n >= 0 ? String(c.args[2 + n] ?? "?") : "?";
}
