/**
 * A private redis-server per caller (dev stack, tests): spawned on 127.0.0.1 only, nothing kept on
 * disk, stopped by its own PID. It never touches a Redis it did not start (6379 is refused).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { freePort } from "./ports.js";
import { RespClient, RespError } from "./resp.js";

export type RedisProcess = {
  port: number;
  /** redis://127.0.0.1:PORT */
  url: string;
  pid: number;
  stop(): Promise<void>;
};

export const REDIS_MISSING =
  "redis-server not found on PATH: install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)";

/** The machine's own Redis usually lives here; a test must never flush or stop it. */
const RESERVED_PORT = 6379;
const START_TIMEOUT_MS = 10_000;
const STOP_GRACE_MS = 2_000;

/** Looks for an executable redis-server on PATH without running anything. */
export function redisServerAvailable(): boolean {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir === "") continue;
    try {
      accessSync(join(dir, "redis-server"), constants.X_OK);
      return true;
    } catch {
      // not in this directory
    }
  }
  return false;
}

/** Children still alive, killed if this process exits without stopping them (e.g. a crashed test worker). */
const live = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of live) child.kill("SIGKILL");
});

/**
 * Spawns redis-server on a free port (or `opts.port`) and resolves once it answers PING.
 *
 * @example const redis = await startRedis(); ...; await redis.stop();
 */
export async function startRedis(opts: { port?: number } = {}): Promise<RedisProcess> {
  if (opts.port === RESERVED_PORT)
    throw new Error(`refusing to start a test Redis on ${RESERVED_PORT}: it belongs to the machine`);
  if (!redisServerAvailable()) throw new Error(REDIS_MISSING);
  // A free port can be taken between freePort() and bind(): retry with a new one in that case.
  const attempts = opts.port === undefined ? 3 : 1;
  let lastError: Error | undefined;
  for (let i = 0; i < attempts; i++) {
    const port = opts.port ?? (await pickPort());
    try {
      return await launch(port);
    } catch (error) {
      lastError = error instanceof Error ? error : new Error(String(error));
      if (lastError.message === REDIS_MISSING) throw lastError;
    }
  }
  throw lastError ?? new Error("redis-server did not start");
}

async function pickPort(): Promise<number> {
  for (;;) {
    const port = await freePort();
    if (port !== RESERVED_PORT) return port;
  }
}

async function launch(port: number): Promise<RedisProcess> {
  const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"];
  args.push("--daemonize", "no", "--protected-mode", "yes", "--dir", tmpdir(), "--loglevel", "warning");
  const child = spawn("redis-server", args, { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const keep = (chunk: Buffer) => (output = (output + chunk.toString("utf8")).slice(-2_000));
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const spawnFailed = new Promise<never>((_, reject) =>
    child.once("error", (error: NodeJS.ErrnoException) =>
      reject(error.code === "ENOENT" ? new Error(REDIS_MISSING) : error),
    ),
  );
  spawnFailed.catch(() => undefined);
  live.add(child);
  void exited.then(() => live.delete(child));

  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
    await exited;
    clearTimeout(timer);
  };

  try {
    await Promise.race([waitUntilServing(port, child, exited), spawnFailed]);
  } catch (error) {
    await stop();
    const detail = output.trim() === "" ? "" : `\n${output.trim()}`;
    throw error instanceof Error && error.message === REDIS_MISSING
      ? error
      : new Error(`${String(error instanceof Error ? error.message : error)}${detail}`);
  }
  const pid = child.pid;
  if (pid === undefined) throw new Error("redis-server has no pid");
  return { port, url: `redis://127.0.0.1:${port}`, pid, stop };
}

/**
 * Polls PING, then checks that the server answering is our child: if the port was taken by some
 * other Redis, its PONG must not be mistaken for ours.
 */
async function waitUntilServing(port: number, child: ChildProcess, exited: Promise<void>): Promise<void> {
  let dead = false;
  void exited.then(() => (dead = true));
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (dead) throw new Error(`redis-server exited while starting on port ${port}`);
    const client = new RespClient({ port, timeoutMs: 1_000 });
    try {
      const pong = await client.send(["PING"]);
      if (Buffer.isBuffer(pong) && pong.toString() === "PONG") {
        const info = await client.send(["INFO", "server"]);
        const pid = Buffer.isBuffer(info) ? /process_id:(\d+)/.exec(info.toString())?.[1] : undefined;
        if (pid !== undefined && Number(pid) === child.pid) return;
        if (pid !== undefined) throw new Error(`port ${port} is served by another Redis (pid ${pid})`);
      } else if (pong instanceof RespError && !pong.message.startsWith("LOADING")) {
        throw new Error(`redis-server on port ${port} answered PING with ${pong.message}`);
      }
    } catch (error) {
      if (error instanceof Error && !/ECONNREFUSED|connection closed|did not answer/.test(error.message)) throw error;
    } finally {
      client.close();
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`redis-server on port ${port} did not answer PING within ${START_TIMEOUT_MS} ms`);
}
