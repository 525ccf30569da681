/**
 * The bench's own local stack: a private redis-server, the Upstash-REST bridge in front of it,
 * the demo origin, and sluice Workers in Miniflare running the bundle wrangler builds. Everything
 * listens on 127.0.0.1 only and is stopped by `Cleanup`, also on failure and on SIGINT/SIGTERM.
 */
import { spawn } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import { Miniflare } from "miniflare";
import {
  startBridge,
  type Bridge,
  startOrigin,
  type DemoOrigin,
  startRedis,
  type RedisProcess,
  RespClient,
  RespError,
} from "@sluice/dev";
import { loadConfig } from "../src/config/index.js";
import type { SluiceInput } from "../src/config/schema.js";

export const TOKEN = "bench-token";
export const BUILD_DIR = resolve(".wrangler/bench-build");

/** Stops what was started, last started first; runs once even if called from several places. */
export class Cleanup {
  private readonly steps: Array<{ label: string; stop: () => Promise<void> | void }> = [];
  private running: Promise<void> | undefined;

  add(label: string, stop: () => Promise<void> | void): void {
    this.steps.push({ label, stop });
  }

  run(): Promise<void> {
    this.running ??= (async () => {
      for (const { label, stop } of this.steps.reverse()) {
        try {
          await withTimeout(Promise.resolve(stop()), 10_000, `stopping ${label}`);
        } catch (error) {
          console.error(`bench: could not stop ${label}: ${error instanceof Error ? error.message : String(error)}`);
        }
      }
    })();
    return this.running;
  }
}

/** Builds the Worker exactly as a deploy would (wrangler bundles the Lua as text modules). */
export async function buildWorker(cleanup: Cleanup): Promise<string> {
  rmSync(BUILD_DIR, { recursive: true, force: true });
  const args = ["wrangler", "deploy", "--dry-run", "--outdir", BUILD_DIR, "--config", "wrangler.toml"];
  const child = spawn("npx", args, {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" },
  });
  cleanup.add("wrangler build", () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString("utf8")).slice(-4_000)));
  const code = await new Promise<number | null>((done, fail) => {
    child.once("error", fail);
    child.once("exit", (c) => done(c));
  });
  const bundle = resolve(BUILD_DIR, "index.js");
  if (code !== 0 || !existsSync(bundle))
    throw new Error(`wrangler build failed (exit ${String(code)}):\n${stderr.trim()}`);
  return bundle;
}

export interface BenchStack {
  redis: RedisProcess;
  bridge: Bridge;
  origin: DemoOrigin;
  /**
   * A sluice Worker (its own workerd) on this stack, with the given `SLUICE` configuration.
   * `bindings` are added to (or replace) the default ones, e.g. another home Redis or the
   * `UPSTASH_REDIS_REST_URL_<REGION>` secrets of other regions.
   */
  worker(sluice: SluiceInput, bindings?: Record<string, string>, options?: WorkerOptions): Promise<Miniflare>;
  /** A RESP connection straight to the bench Redis (not through the bridge). */
  resp: RespClient;
}

export interface WorkerOptions {
  /**
   * Swallow the Worker's own stdout/stderr (e.g. one `store_error` line per degraded decision,
   * which would otherwise land in the middle of the table on stdout).
   */
  quiet?: boolean;
}

/** Each Worker's one dispose, shared by `disposeWorker` and the cleanup (Miniflare throws on a second dispose). */
const disposers = new WeakMap<Miniflare, () => Promise<void>>();

/** Stops a Worker started by `BenchStack.worker` now, rather than at the end of the run. */
export function disposeWorker(mf: Miniflare): Promise<void> {
  return (disposers.get(mf) ?? (() => mf.dispose()))();
}

/** One more private Redis behind its own Upstash-REST bridge (e.g. another region's database). */
export interface RedisBridge {
  redis: RedisProcess;
  bridge: Bridge;
  resp: RespClient;
}

/** A private redis-server and a bridge in front of it, both registered with `cleanup`. */
export async function startRedisBridge(cleanup: Cleanup, label = ""): Promise<RedisBridge> {
  const name = label ? ` ${label}` : "";
  const redis = await startRedis();
  cleanup.add(`redis-server${name} (pid ${redis.pid})`, () => redis.stop());
  const bridge = await startBridge({ redisUrl: redis.url, token: TOKEN });
  cleanup.add(`bridge${name}`, () => bridge.close());
  const resp = RespClient.fromUrl(redis.url, { timeoutMs: 10_000 });
  cleanup.add(`RESP client${name}`, () => resp.close());
  return { redis, bridge, resp };
}

/** `bundle` may still be building: Workers wait for it, Redis, bridge and origin do not. */
export async function startStack(cleanup: Cleanup, bundle: Promise<string>): Promise<BenchStack> {
  const { redis, bridge, resp } = await startRedisBridge(cleanup);
  const origin = await startOrigin();
  cleanup.add("demo origin", () => origin.close());

  return {
    redis,
    bridge,
    origin,
    resp,
    async worker(sluice, bindings = {}, options = {}) {
      const scriptPath = await bundle;
      // Fail here, with the field named, rather than with 500s in the middle of a measurement.
      const checked = loadConfig({ ORIGIN_URL: origin.url, SLUICE: sluice });
      if (!checked.ok) throw new Error(`bench configuration rejected by sluice: ${checked.error.message}`);
      const mf = new Miniflare({
        modules: true,
        scriptPath,
        modulesRules: [{ type: "Text", include: ["**/*.lua"] }],
        compatibilityDate: "2026-04-01",
        bindings: {
          ORIGIN_URL: origin.url,
          SLUICE: sluice,
          UPSTASH_REDIS_REST_URL: bridge.url,
          UPSTASH_REDIS_REST_TOKEN: TOKEN,
          ...bindings,
        },
        ...(options.quiet
          ? {
              handleRuntimeStdio: (out: NodeJS.ReadableStream, err: NodeJS.ReadableStream) => (
                out.resume(),
                err.resume()
              ),
            }
          : {}),
      });
      let disposed: Promise<void> | undefined;
      const dispose = () => (disposed ??= mf.dispose());
      disposers.set(mf, dispose);
      cleanup.add("miniflare", dispose);
      await mf.ready;
      return mf;
    },
  };
}

/** One `INFO commandstats` line. */
export interface CommandStat {
  calls: number;
  failed_calls: number;
  rejected_calls: number;
}

/** `INFO commandstats` as a map from command name (lower case, e.g. `evalsha`, `config|get`). */
export async function commandStats(resp: RespClient): Promise<Map<string, CommandStat>> {
  const reply = await resp.send(["INFO", "commandstats"]);
  if (!Buffer.isBuffer(reply))
    throw new Error(`INFO commandstats: unexpected reply ${reply instanceof RespError ? reply.message : typeof reply}`);
  const stats = new Map<string, CommandStat>();
  for (const line of reply.toString("utf8").split(/\r?\n/)) {
    const m = /^cmdstat_([^:]+):(.*)$/.exec(line);
    if (!m) continue;
    const fields = new Map((m[2] ?? "").split(",").map((kv) => kv.split("=") as [string, string]));
    stats.set(m[1] as string, {
      calls: Number(fields.get("calls") ?? 0),
      failed_calls: Number(fields.get("failed_calls") ?? 0),
      rejected_calls: Number(fields.get("rejected_calls") ?? 0),
    });
  }
  return stats;
}

/** after − before, per command, leaving out commands that did not move. */
export function statsDelta(
  before: Map<string, CommandStat>,
  after: Map<string, CommandStat>,
): Record<string, CommandStat> {
  const out: Record<string, CommandStat> = {};
  for (const [name, a] of after) {
    const b = before.get(name) ?? { calls: 0, failed_calls: 0, rejected_calls: 0 };
    const d = {
      calls: a.calls - b.calls,
      failed_calls: a.failed_calls - b.failed_calls,
      rejected_calls: a.rejected_calls - b.rejected_calls,
    };
    if (d.calls !== 0 || d.failed_calls !== 0 || d.rejected_calls !== 0) out[name] = d;
  }
  return out;
}

export async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
