/**
 * EVALSHA of lua/decide.lua against plain INCR, in redis-benchmark terms (ops/s), straight on
 * the bench Redis: what one decision costs the Redis server itself, without HTTP or the Worker.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { stripUnknownFlags, RespError, replyToJs } from "@sluice/dev";
import { loadConfig, type Limit } from "../src/config/index.js";
import type { scriptCall } from "../src/features/rate-limit/decision/decision.js";
import { type LimitInput } from "./config.js";
import { importDecide } from "./lua-text.js";
import { type Cleanup, commandStats, statsDelta, type BenchStack } from "./stack.js";
import { round } from "./stats.js";

export const DECIDE_LUA = resolve("lua/decide.lua");

/**
 * decide.lua as a stock redis-server runs it, for the sections that talk RESP straight to Redis:
 * without Upstash's `allow-key-locking` shebang flag, which Redis 7 refuses (the bridge strips it
 * the same way for everything that goes through it).
 */
export function decideLuaForRedis(): string {
  const source = readFileSync(DECIDE_LUA, "utf8");
  return stripUnknownFlags(source) ?? source;
}

export interface BenchmarkOptions {
  requests: number;
  clients: number;
  keyspace: number;
}

export interface CommandRun {
  key: string;
  label: string;
  /** The command line given to redis-benchmark (the script SHA shortened). */
  command: string;
  ops_per_sec: number;
  p50_ms: number | null;
  /** ops/s of this command ÷ ops/s of INCR. */
  ratio_to_incr: number;
  /** Sanity: calls of the command Redis counted, and how many of them failed. */
  redis_calls: number;
  redis_failed_calls: number;
}

export interface ScriptResult {
  sha: string;
  options: BenchmarkOptions;
  /** The KEYS and ARGV a real route gets, as the Worker builds them (`scriptCall`), per case. */
  limits: Array<{ route: string; label: string; limits: number; keys: string[]; argv: string[] }>;
  runs: CommandRun[];
}

/**
 * The scripts measured: one limit of 100/s per algorithm (as in the issue), a route of four token
 * buckets, and a route with one limit of each algorithm. Each gets its own key prefix, so no run
 * reads another algorithm's buckets.
 */
const CASES: Array<{ key: string; label: string; limits: LimitInput[] }> = [
  {
    key: "evalsha_1",
    label: "1 limit: token_bucket",
    limits: [{ name: "per-ip", key: "ip", rate: 100, period: "1s" }],
  },
  {
    key: "evalsha_1_warmup",
    label: "1 limit: token_bucket, warmup 10s",
    limits: [{ name: "per-ip", key: "ip", rate: 100, period: "1s", warmup: "10s" }],
  },
  {
    key: "evalsha_1_leaky",
    label: "1 limit: leaky_bucket, nodelay",
    limits: [{ name: "per-ip", key: "ip", algorithm: "leaky_bucket", rate: 100, period: "1s", nodelay: true }],
  },
  {
    key: "evalsha_1_fixed",
    label: "1 limit: fixed_window",
    limits: [{ name: "per-ip", key: "ip", algorithm: "fixed_window", rate: 100, period: "1s" }],
  },
  {
    key: "evalsha_1_sliding",
    label: "1 limit: sliding_window",
    limits: [{ name: "per-ip", key: "ip", algorithm: "sliding_window", rate: 100, period: "1s" }],
  },
  {
    key: "evalsha_4",
    label: "4 limits: 4 token buckets",
    limits: [
      { name: "per-ip", key: "ip", rate: 100, period: "1s" },
      { name: "per-ip-minute", key: "ip", rate: 1000, period: "1m" },
      { name: "per-path", key: "path", rate: 10, period: "1s", burst: 20 },
      { name: "site-hour", key: "global", rate: 5000, period: "1h" },
    ],
  },
  {
    key: "evalsha_4_algorithms",
    label: "4 limits: one of each algorithm",
    limits: [
      { name: "per-ip", key: "ip", algorithm: "token_bucket", rate: 100, period: "1s" },
      { name: "per-path", key: "path", algorithm: "leaky_bucket", rate: 10, period: "1s", burst: 20, nodelay: true },
      { name: "per-ip-minute", key: "ip", algorithm: "fixed_window", rate: 1000, period: "1m" },
      { name: "site-hour", key: "global", algorithm: "sliding_window", rate: 5000, period: "1h" },
    ],
  },
];

export async function measureScripts(
  stack: BenchStack,
  cleanup: Cleanup,
  opts: BenchmarkOptions,
): Promise<ScriptResult> {
  const sha = await loadDecide(stack);
  // decide.ts imports decide.lua: loaded at run time, through the .lua hook (see lua-text.ts)
  const call = (await importDecide()).scriptCall;
  const scripts = CASES.map((c, i) => ({ ...c, compiled: limitsOf(c.key, c.limits), prefix: `bench:s${i}:bucket` }));
  for (const c of scripts) await verify(stack, call, sha, c.compiled, c.label);

  const cases: Array<{ key: string; label: string; statName: string; args: string[] }> = [
    { key: "incr", label: "INCR bench:counter", statName: "incr", args: ["INCR", "bench:counter"] },
    ...scripts.map((c) => ({
      key: c.key,
      label: `EVALSHA, ${c.label}`,
      statName: "evalsha",
      args: evalsha(call, sha, c.compiled, c.prefix),
    })),
  ];
  const runs: Omit<CommandRun, "ratio_to_incr">[] = [];
  for (const c of cases) runs.push(await benchmarkCase(stack, cleanup, opts, c, sha));
  const incr = runs[0]?.ops_per_sec ?? Number.NaN;
  return {
    sha,
    options: opts,
    limits: scripts.map((c) => {
      const { keys, args } = call(
        c.compiled.map((limit, i) => ({ limit, key: `${c.prefix}${i + 1}:__rand_int__` })),
        "take",
      );
      return { route: c.key, label: c.label, limits: c.compiled.length, keys, argv: args };
    }),
    runs: runs.map((r) => ({ ...r, ratio_to_incr: round(r.ops_per_sec / incr) })),
  };
}

/** Loads decide.lua as Redis gets it and checks that Redis names it by its SHA-1. */
async function loadDecide(stack: BenchStack): Promise<string> {
  const source = decideLuaForRedis();
  const loaded = await stack.resp.send(["SCRIPT", "LOAD", source]);
  if (!Buffer.isBuffer(loaded))
    throw new Error(
      `SCRIPT LOAD of ${DECIDE_LUA} failed: ${loaded instanceof RespError ? loaded.message : JSON.stringify(loaded)}`,
    );
  const sha = loaded.toString("utf8");
  const expected = createHash("sha1").update(source, "utf8").digest("hex");
  if (sha !== expected) throw new Error(`SCRIPT LOAD answered ${sha}, but the SHA-1 of ${DECIDE_LUA} is ${expected}`);
  return sha;
}

/** One redis-benchmark run of a command, with Redis's own count of its calls (none may fail). */
async function benchmarkCase(
  stack: BenchStack,
  cleanup: Cleanup,
  opts: BenchmarkOptions,
  c: { key: string; label: string; statName: string; args: string[] },
  sha: string,
): Promise<Omit<CommandRun, "ratio_to_incr">> {
  const before = await commandStats(stack.resp);
  const { opsPerSec, p50 } = await redisBenchmark(stack.redis.port, opts, c.args, cleanup);
  const delta = statsDelta(before, await commandStats(stack.resp))[c.statName];
  const failed = (delta?.failed_calls ?? 0) + (delta?.rejected_calls ?? 0);
  // redis-benchmark counts an error reply as a completed request: a failing script would look fast.
  if (failed > 0) throw new Error(`${c.label}: Redis counted ${failed} failed calls during the benchmark`);
  return {
    key: c.key,
    label: c.label,
    command: c.args.map((a) => (a === sha ? `${sha.slice(0, 8)}…` : a)).join(" "),
    ops_per_sec: opsPerSec,
    p50_ms: p50,
    redis_calls: delta?.calls ?? 0,
    redis_failed_calls: failed,
  };
}

/** The limits of a route, from sluice's own configuration compiler (what the Worker runs). */
function limitsOf(name: string, limits: LimitInput[]): Limit[] {
  const r = loadConfig({
    ORIGIN_URL: "http://127.0.0.1",
    SLUICE: { routes: [{ name: name.replace(/_/g, "-"), match: "/", limits }] },
  });
  if (!r.ok) throw new Error(`bench limit rejected by sluice: ${r.error.message}`);
  return r.config.routes[0]?.limits ?? [];
}

/** EVALSHA with exactly the KEYS/ARGV the Worker sends (`scriptCall`), keys randomised per call. */
function evalsha(
  call: typeof scriptCall,
  sha: string,
  limits: Limit[],
  prefix: string,
  suffix = ":__rand_int__",
): string[] {
  const { keys, args } = call(
    limits.map((limit, i) => ({ limit, key: `${prefix}${i + 1}${suffix}` })),
    "take",
  );
  return ["EVALSHA", sha, String(keys.length), ...keys, ...args];
}

/** One real call first: the script must answer "admitted" with these arguments, not an error. */
async function verify(
  stack: BenchStack,
  call: typeof scriptCall,
  sha: string,
  limits: Limit[],
  label: string,
): Promise<void> {
  const reply = await stack.resp.send(evalsha(call, sha, limits, `bench:verify:${label.replace(/\W+/g, "-")}:`, ""));
  const ok = Array.isArray(reply) && reply.length === 2 + 8 * limits.length && reply[0] === 1; // + the version, last
  if (!ok)
    throw new Error(`EVALSHA decide.lua, ${label}, did not admit a fresh request: ${JSON.stringify(replyToJs(reply))}`);
}

async function redisBenchmark(
  port: number,
  opts: BenchmarkOptions,
  command: string[],
  cleanup: Cleanup,
): Promise<{ opsPerSec: number; p50: number | null }> {
  const args = ["-h", "127.0.0.1", "-p", String(port), "-n", String(opts.requests), "-c", String(opts.clients)];
  args.push("-r", String(opts.keyspace), "-q", ...command);
  const child = spawn("redis-benchmark", args, { stdio: ["ignore", "pipe", "pipe"] });
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  };
  cleanup.add("redis-benchmark", kill);
  let out = "";
  child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")));
  child.stderr.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")));
  const timer = setTimeout(kill, 60_000);
  const code = await exitOf(child);
  clearTimeout(timer);
  // -q rewrites one line with \r while running; the last figure is the final one.
  const rps = [...out.matchAll(/([\d.]+) requests per second/g)].at(-1)?.[1];
  const p50 = [...out.matchAll(/p50=([\d.]+) msec/g)].at(-1)?.[1];
  if (code !== 0 || rps === undefined || /ERR|NOSCRIPT|WRONGTYPE/.test(out)) {
    throw new Error(
      `redis-benchmark ${command[0] ?? ""} failed (exit ${String(code)}): ${out.replace(/\r/g, "\n").trim().slice(-500)}`,
    );
  }
  return { opsPerSec: Number(rps), p50: p50 === undefined ? null : Number(p50) };
}

/** The exit code of redis-benchmark, or the reason it could not start. */
function exitOf(child: ChildProcess): Promise<number | null> {
  return new Promise<number | null>((done, fail) => {
    child.once("error", (e: NodeJS.ErrnoException) =>
      fail(
        e.code === "ENOENT"
          ? new Error("redis-benchmark not found on PATH (it ships with redis-server / redis-tools)")
          : e,
      ),
    );
    child.once("exit", (c) => done(c));
  });
}
