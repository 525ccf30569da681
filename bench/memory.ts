/**
 * Section 6, Redis memory per bucket: for each algorithm, `n` buckets are created by one real
 * decision each (EVALSHA of the production decide.lua, distinct keys named as the Worker names
 * them), and each bucket's `MEMORY USAGE` is read right after its decision. As a cross-check, the
 * growth of `used_memory` over the `n` buckets is divided by `n`: unlike MEMORY USAGE it includes
 * the key's entry in the expires table and the hash tables' slots.
 *
 * Runs on its own connection in database 9 of the bench Redis, emptied before and after each
 * algorithm, so every algorithm starts from the same empty tables.
 */
import { createHash } from "node:crypto";
import { RespClient, type RespReply, replyToJs } from "@sluice/dev";
import { loadConfig, type Limit } from "../src/config/index.js";
import { hashIdentifier } from "../src/identity/hash.js";
import { bucketKey } from "../src/store/layout.js";
import type { scriptCall } from "../src/features/rate-limit/decision/decision.js";
import type { LimitInput } from "./config.js";
import type { Cleanup } from "./stack.js";
import { IpSource, percentile } from "./stats.js";

type Call = typeof scriptCall;

const DB = "9";

/** 100 per hour: every key lives at least 36 s after its request, longer than the measurement. */
const CASES: Array<{ key: string; label: string; limit: LimitInput }> = [
  {
    key: "token_bucket",
    label: "token_bucket",
    limit: { name: "per-ip", algorithm: "token_bucket", rate: 100, period: "1h" },
  },
  {
    key: "token_bucket_warmup",
    label: "token_bucket, warmup 10s",
    limit: { name: "per-ip", algorithm: "token_bucket", rate: 100, period: "1h", warmup: "10s" },
  },
  {
    key: "leaky_bucket",
    label: "leaky_bucket, nodelay",
    limit: { name: "per-ip", algorithm: "leaky_bucket", rate: 100, period: "1h", nodelay: true },
  },
  {
    key: "fixed_window",
    label: "fixed_window",
    limit: { name: "per-ip", algorithm: "fixed_window", rate: 100, period: "1h" },
  },
  {
    key: "sliding_window",
    label: "sliding_window",
    limit: { name: "per-ip", algorithm: "sliding_window", rate: 100, period: "1h" },
  },
];

export interface MemoryRun {
  key: string;
  label: string;
  /** The limit's ARGV as the script gets it (`scriptCall`, without mode, n and override_idx; see the contract atop decide.lua). */
  argv: string[];
  buckets: number;
  /** MEMORY USAGE over every bucket, in bytes. */
  memory_usage: { median: number; min: number; max: number };
  /** MEMORY USAGE of the sample bucket's key and value written by a plain SET (PX) from a client instead. */
  plain_set_memory_usage: number;
  /** (used_memory after − before) ÷ buckets; null when some key expired before it was read or used_memory did not settle. */
  used_memory_per_bucket: number | null;
  /** Keys left at the end (should equal `buckets`). */
  keys_found: number;
  sample: { key: string; key_bytes: number; value: string; value_bytes: number; pttl_ms: number };
}

export interface MemoryResult {
  buckets: number;
  limit: string;
  runs: MemoryRun[];
}

export async function measureMemory(
  redisUrl: string,
  cleanup: Cleanup,
  call: Call,
  source: string,
  n: number,
): Promise<MemoryResult> {
  const resp = RespClient.fromUrl(redisUrl, { timeoutMs: 10_000 });
  cleanup.add("RESP client (memory)", () => resp.close());
  const sha = text(await resp.send(["SCRIPT", "LOAD", source]), "SCRIPT LOAD");
  if (sha !== createHash("sha1").update(source, "utf8").digest("hex"))
    throw new Error(`section 6: SCRIPT LOAD answered ${sha}, not the SHA-1 of decide.lua`);
  ok(await resp.send(["SELECT", DB]), `SELECT ${DB}`);
  const ctx: MemoryContext = { resp, call, sha };

  // A discarded first pass: the first keys of a connection and a database carry one-time allocations.
  const first = CASES[0];
  if (first) {
    const limit = limitOf(first.limit);
    ok(await resp.send(["FLUSHDB", "SYNC"]), "FLUSHDB");
    await fill(ctx, "warm-up", limit, await keysFor(limit, Math.min(n, 200)));
  }

  const runs: MemoryRun[] = [];
  for (const c of CASES) runs.push(await memoryRun(ctx, c, n));
  resp.close();
  return { buckets: n, limit: "rate 100 per 1h (cost 1), one admitted request per bucket", runs };
}

interface MemoryContext {
  resp: RespClient;
  call: Call;
  /** decide.lua's SHA-1, loaded. */
  sha: string;
}

/** Creates one bucket per key, one at a time; MEMORY USAGE of each right after. */
async function fill(
  { resp, call, sha }: MemoryContext,
  label: string,
  limit: Limit,
  keys: string[],
): Promise<number[]> {
  // Buckets one at a time: a long pipeline would grow the connection's buffers and blur used_memory.
  const sizes: number[] = [];
  for (const key of keys) {
    const { keys: k, args } = call([{ limit, key }], "take");
    const [decision, usage] = await resp.sendMany([
      ["EVALSHA", sha, String(k.length), ...k, ...args],
      ["MEMORY", "USAGE", key],
    ]);
    if (!Array.isArray(decision) || decision[0] !== 1)
      throw new Error(`section 6 ${label}: a fresh bucket's first request was not admitted: ${describe(decision)}`);
    if (typeof usage !== "number")
      throw new Error(`section 6 ${label}: MEMORY USAGE ${key} answered ${describe(usage)}`);
    sizes.push(usage);
  }
  return sizes;
}

/** The bucket keys the Worker would write for `count` different clients. */
function keysFor(limit: Limit, count: number, ips = new IpSource()): Promise<string[]> {
  return Promise.all(
    Array.from({ length: count }, async () =>
      bucketKey("sluice", "api", limit.name, await hashIdentifier(`${ips.take()}@us`)),
    ),
  );
}

/** One algorithm: n fresh buckets in an empty database, their sizes, used_memory and a sample. */
async function memoryRun(ctx: MemoryContext, c: (typeof CASES)[number], n: number): Promise<MemoryRun> {
  const { resp, call } = ctx;
  const limit = limitOf(c.limit);
  ok(await resp.send(["FLUSHDB", "SYNC"]), "FLUSHDB");
  const keys = await keysFor(limit, n);
  const before = await settledMemory(resp);
  const sizes = await fill(ctx, c.key, limit, keys);
  const after = await settledMemory(resp);
  const found = await resp.send(["DBSIZE"]);
  const keysFound = typeof found === "number" ? found : -1;
  const sampleKey = keys[0] as string;
  const [value, pttl] = await resp.sendMany([
    ["GET", sampleKey],
    ["PTTL", sampleKey],
  ]);
  const valueText = Buffer.isBuffer(value) ? value.toString("utf8") : describe(value);
  const plain = await plainSetUsage(resp, c.key, sampleKey, valueText);
  const sorted = [...sizes].sort((a, b) => a - b);
  return {
    key: c.key,
    label: c.label,
    argv: call([{ limit, key: "k" }], "take").args.slice(3),
    buckets: n,
    memory_usage: { median: percentile(sorted, 50), min: sorted[0] ?? Number.NaN, max: sorted.at(-1) ?? Number.NaN },
    plain_set_memory_usage: plain,
    used_memory_per_bucket:
      keysFound === n && before !== null && after !== null ? Math.round(((after - before) / n) * 10) / 10 : null,
    keys_found: keysFound,
    sample: {
      key: sampleKey,
      key_bytes: Buffer.byteLength(sampleKey),
      value: valueText,
      value_bytes: Buffer.byteLength(valueText),
      pttl_ms: typeof pttl === "number" ? pttl : -3,
    },
  };
}

/**
 * The same key and value written by a plain SET from a client, for reference: a script's SET may
 * store the value in a larger object that Redis reused from an earlier call of the same script.
 * Leaves the database empty.
 */
async function plainSetUsage(resp: RespClient, label: string, key: string, value: string): Promise<number> {
  ok(await resp.send(["FLUSHDB", "SYNC"]), "FLUSHDB");
  const [, plain] = await resp.sendMany([
    ["SET", key, value, "PX", "3600000"],
    ["MEMORY", "USAGE", key],
  ]);
  if (typeof plain !== "number")
    throw new Error(`section 6 ${label}: MEMORY USAGE after a plain SET answered ${describe(plain)}`);
  ok(await resp.send(["FLUSHDB", "SYNC"]), "FLUSHDB");
  return plain;
}

/**
 * used_memory once it has settled: a hash table that grew is rehashed incrementally (partly by
 * serverCron, 10 times a second), and until that ends both its old and new slot arrays count.
 */
async function settledMemory(resp: RespClient): Promise<number | null> {
  let last = await usedMemory(resp);
  for (let i = 0; i < 10; i++) {
    await new Promise((done) => setTimeout(done, 100));
    const now = await usedMemory(resp);
    if (now === last) return now;
    last = now;
  }
  return null; // still moving: something else is allocating or expiring
}

async function usedMemory(resp: RespClient): Promise<number> {
  const info = text(await resp.send(["INFO", "memory"]), "INFO memory");
  const m = /^used_memory:(\d+)\r?$/m.exec(info);
  if (!m) throw new Error("section 6: no used_memory in INFO memory");
  return Number(m[1]);
}

function limitOf(input: LimitInput): Limit {
  const r = loadConfig({
    ORIGIN_URL: "http://127.0.0.1",
    SLUICE: { routes: [{ name: "api", match: "/", limits: [input] }] },
  });
  if (!r.ok) throw new Error(`section 6 limit rejected by sluice: ${r.error.message}`);
  const limit = r.config.routes[0]?.limits[0];
  if (!limit) throw new Error("section 6: no limit compiled");
  return limit;
}

function text(reply: RespReply, what: string): string {
  if (!Buffer.isBuffer(reply)) throw new Error(`section 6: ${what} answered ${describe(reply)}`);
  return reply.toString("utf8");
}

function ok(reply: RespReply, what: string): void {
  if (!Buffer.isBuffer(reply) || reply.toString("utf8") !== "OK")
    throw new Error(`section 6: ${what} answered ${describe(reply)}`);
}

function describe(reply: RespReply | undefined): string {
  return reply === undefined ? "nothing" : JSON.stringify(replyToJs(reply));
}
