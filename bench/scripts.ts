/**
 * EVALSHA of lua/decide.lua against plain INCR, in redis-benchmark terms (ops/s), straight on
 * the bench Redis: what one decision costs the Redis server itself, without HTTP or the Worker.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { RespError } from "../dev/resp.js";
import { loadConfig, type Limit } from "../src/config/index.js";
import type { scriptCall } from "../src/limiter/decide.js";
import type { SluiceInput } from "../src/config/schema.js";
import { importDecide } from "./lua-text.js";
import { type Cleanup, commandStats, statsDelta, type BenchStack } from "./stack.js";
import { round } from "./stats.js";

export const DECIDE_LUA = resolve("lua/decide.lua");

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
  /** The ARGV a real route gets, as the Worker builds it (`scriptCall`: mode, n, 7 per limit). */
  limits: Array<{ route: string; argv: string[] }>;
  runs: CommandRun[];
}

/** One limit of 100/s (as in the issue), and a route of four different ones. */
const ONE: SluiceInput["routes"] = [{ name: "one", match: "/one", limits: [{ name: "per-ip", key: "ip", rate: 100, period: "1s" }] }];
const FOUR: SluiceInput["routes"] = [
  {
    name: "four",
    match: "/four",
    limits: [
      { name: "per-ip", key: "ip", rate: 100, period: "1s" },
      { name: "per-ip-minute", key: "ip", rate: 1000, period: "1m" },
      { name: "per-path", key: "path", rate: 10, period: "1s", burst: 20 },
      { name: "site-hour", key: "global", rate: 5000, period: "1h" },
    ],
  },
];

export async function measureScripts(stack: BenchStack, cleanup: Cleanup, opts: BenchmarkOptions): Promise<ScriptResult> {
  const source = readFileSync(DECIDE_LUA, "utf8");
  const loaded = await stack.resp.send(["SCRIPT", "LOAD", source]);
  if (!Buffer.isBuffer(loaded)) throw new Error(`SCRIPT LOAD of ${DECIDE_LUA} failed: ${loaded instanceof RespError ? loaded.message : JSON.stringify(loaded)}`);
  const sha = loaded.toString("utf8");
  const expected = createHash("sha1").update(source, "utf8").digest("hex");
  if (sha !== expected) throw new Error(`SCRIPT LOAD answered ${sha}, but the SHA-1 of ${DECIDE_LUA} is ${expected}`);

  const one = limitsOf(ONE);
  const four = limitsOf(FOUR);
  // decide.ts imports decide.lua: loaded at run time, through the .lua hook (see lua-text.ts)
  const call = (await importDecide()).scriptCall;
  await verify(stack, call, sha, one);
  await verify(stack, call, sha, four);

  const cases: Array<{ key: string; label: string; statName: string; args: string[] }> = [
    { key: "incr", label: "INCR bench:counter", statName: "incr", args: ["INCR", "bench:counter"] },
    { key: "evalsha_1", label: "EVALSHA decide.lua, 1 limit", statName: "evalsha", args: evalsha(call, sha, one, "bench:bucket") },
    { key: "evalsha_4", label: "EVALSHA decide.lua, 4 limits", statName: "evalsha", args: evalsha(call, sha, four, "bench:bucket") },
  ];
  const runs: Omit<CommandRun, "ratio_to_incr">[] = [];
  for (const c of cases) {
    const before = await commandStats(stack.resp);
    const { opsPerSec, p50 } = await redisBenchmark(stack.redis.port, opts, c.args, cleanup);
    const delta = statsDelta(before, await commandStats(stack.resp))[c.statName];
    const failed = (delta?.failed_calls ?? 0) + (delta?.rejected_calls ?? 0);
    // redis-benchmark counts an error reply as a completed request: a failing script would look fast.
    if (failed > 0) throw new Error(`${c.label}: Redis counted ${failed} failed calls during the benchmark`);
    runs.push({
      key: c.key,
      label: c.label,
      command: c.args.map((a) => (a === sha ? `${sha.slice(0, 8)}…` : a)).join(" "),
      ops_per_sec: opsPerSec,
      p50_ms: p50,
      redis_calls: delta?.calls ?? 0,
      redis_failed_calls: failed,
    });
  }
  const incr = runs[0]?.ops_per_sec ?? Number.NaN;
  return {
    sha,
    options: opts,
    limits: [
      { route: "one", argv: evalsha(call, sha, one, "k").slice(3 + one.length) },
      { route: "four", argv: evalsha(call, sha, four, "k").slice(3 + four.length) },
    ],
    runs: runs.map((r) => ({ ...r, ratio_to_incr: round(r.ops_per_sec / incr) })),
  };
}

/** The limits of a route, from sluice's own configuration compiler (what the Worker runs). */
function limitsOf(routes: SluiceInput["routes"]): Limit[] {
  const r = loadConfig({ ORIGIN_URL: "http://127.0.0.1", SLUICE: { routes } });
  if (!r.ok) throw new Error(`bench limit rejected by sluice: ${r.error.message}`);
  return r.config.routes[0]?.limits ?? [];
}

/** EVALSHA with exactly the KEYS/ARGV the Worker sends (`scriptCall`), keys randomised per call. */
function evalsha(call: typeof scriptCall, sha: string, limits: Limit[], prefix: string, suffix = ":__rand_int__"): string[] {
  const { keys, args } = call(limits.map((limit, i) => ({ limit, key: `${prefix}${i + 1}${suffix}` })), "take");
  return ["EVALSHA", sha, String(keys.length), ...keys, ...args];
}

/** One real call first: the script must answer "admitted" with these arguments, not an error. */
async function verify(stack: BenchStack, call: typeof scriptCall, sha: string, limits: Limit[]): Promise<void> {
  const reply = await stack.resp.send(evalsha(call, sha, limits, "bench:verify", `:${limits.length}`));
  const ok = Array.isArray(reply) && reply.length === 1 + 5 * limits.length && reply[0] === 1;
  if (!ok) throw new Error(`EVALSHA decide.lua with ${limits.length} limit(s) did not admit a fresh request: ${JSON.stringify(reply)}`);
}

async function redisBenchmark(port: number, opts: BenchmarkOptions, command: string[], cleanup: Cleanup): Promise<{ opsPerSec: number; p50: number | null }> {
  const args = ["-h", "127.0.0.1", "-p", String(port), "-n", String(opts.requests), "-c", String(opts.clients), "-r", String(opts.keyspace), "-q", ...command];
  const child = spawn("redis-benchmark", args, { stdio: ["ignore", "pipe", "pipe"] });
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  };
  cleanup.add("redis-benchmark", kill);
  let out = "";
  child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")));
  child.stderr.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")));
  const timer = setTimeout(kill, 60_000);
  const code = await new Promise<number | null>((done, fail) => {
    child.once("error", (e: NodeJS.ErrnoException) => fail(e.code === "ENOENT" ? new Error("redis-benchmark not found on PATH (it ships with redis-server / redis-tools)") : e));
    child.once("exit", (c) => done(c));
  });
  clearTimeout(timer);
  // -q rewrites one line with \r while running; the last figure is the final one.
  const rps = [...out.matchAll(/([\d.]+) requests per second/g)].at(-1)?.[1];
  const p50 = [...out.matchAll(/p50=([\d.]+) msec/g)].at(-1)?.[1];
  if (code !== 0 || rps === undefined || /ERR|NOSCRIPT|WRONGTYPE/.test(out)) {
    throw new Error(`redis-benchmark ${command[0] ?? ""} failed (exit ${String(code)}): ${out.replace(/\r/g, "\n").trim().slice(-500)}`);
  }
  return { opsPerSec: Number(rps), p50: p50 === undefined ? null : Number(p50) };
}
