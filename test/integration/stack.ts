import { Redis } from "@upstash/redis";
import { Miniflare } from "miniflare";
import { afterAll, beforeAll, inject } from "vitest";
import { startBridge, type Bridge } from "../../dev/bridge.js";
import { startOrigin, type DemoOrigin } from "../../dev/origin.js";
import { startRedis, type RedisProcess } from "../../dev/redis-process.js";
import type { SluiceInput } from "../../src/config/schema.js";

export const TOKEN = "test-token";

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A real redis-server (spawned on a free port) behind the project's Upstash-REST bridge. */
export interface RedisStack {
  redis: RedisProcess;
  bridge: Bridge;
  stop(): Promise<void>;
}

export async function startRedisStack(): Promise<RedisStack> {
  const redis = await startRedis();
  const bridge = await startBridge({ redisUrl: redis.url, token: TOKEN });
  const stack: RedisStack = {
    redis,
    bridge,
    // reads the fields at stop time: a test may have replaced `redis` with a restarted one
    async stop() {
      await stack.bridge.close();
      await stack.redis.stop();
    },
  };
  return stack;
}

/**
 * This test file's Redis stack and an Upstash client through its bridge (replies as Redis sent
 * them), started before the file's tests and stopped after them.
 *
 * @example const db = fileRedis(); // then db.redis.get(key), db.stack.bridge.counts()
 */
export function fileRedis(): { readonly stack: RedisStack; readonly redis: Redis } {
  let stack: RedisStack | undefined;
  let redis: Redis | undefined;
  beforeAll(async () => {
    stack = await startRedisStack();
    redis = new Redis({ url: stack.bridge.url, token: TOKEN, enableTelemetry: false, automaticDeserialization: false });
  });
  afterAll(() => stack?.stop());
  const started = <T>(v: T | undefined): T => {
    if (v === undefined) throw new Error("the file's Redis stack starts in beforeAll");
    return v;
  };
  return {
    get stack() {
      return started(stack);
    },
    get redis() {
      return started(redis);
    },
  };
}

export { startOrigin, type DemoOrigin };

export interface WorkerOptions {
  sluice: SluiceInput | string;
  origin: string;
  redisRestUrl?: string;
  bindings?: Record<string, string>;
  /** Bind SLUICE_QUEUE / SLUICE_DLQ and consume both, as wrangler.toml does. */
  queues?: boolean;
  /** Listen on a loopback port (for a browser); `await mf.ready` gives the URL. */
  listen?: boolean;
}

/**
 * One sluice Worker in its own workerd process (one isolate), running the bundle wrangler built
 * in the global setup. Several of these against one Redis play several edge locations.
 */
export function startWorker(opts: WorkerOptions): Miniflare {
  const bindings: Record<string, unknown> = { ORIGIN_URL: opts.origin, SLUICE: opts.sluice, ...opts.bindings };
  if (opts.redisRestUrl) {
    bindings.UPSTASH_REDIS_REST_URL = opts.redisRestUrl;
    bindings.UPSTASH_REDIS_REST_TOKEN = TOKEN;
  }
  return new Miniflare({
    modules: true,
    scriptPath: inject("workerBundle"),
    modulesRules: [{ type: "Text", include: ["**/*.lua"] }],
    compatibilityDate: "2026-04-01",
    bindings,
    ...(opts.listen ? { host: "127.0.0.1", port: 0 } : {}),
    // the Worker's own log lines (one per refused decision) would drown the test output
    ...(process.env.SLUICE_TEST_LOGS ? {} : { handleRuntimeStdio: (out: NodeJS.ReadableStream, err: NodeJS.ReadableStream) => (out.resume(), err.resume()) }),
    ...(opts.queues
      ? {
          queueProducers: { SLUICE_QUEUE: { queueName: "sluice-shed" }, SLUICE_DLQ: { queueName: "sluice-shed-dlq" } },
          queueConsumers: {
            "sluice-shed": { maxBatchSize: 10, maxBatchTimeout: 1, maxRetries: 10, deadLetterQueue: "sluice-shed-dlq" },
            "sluice-shed-dlq": { maxBatchSize: 10, maxBatchTimeout: 1 },
          },
        }
      : {}),
  });
}

/** A request as Cloudflare would deliver it: from a given client IP, at a given place. */
export async function call(
  mf: Miniflare,
  path: string,
  init: { method?: string; ip?: string; headers?: Record<string, string>; body?: string; cf?: Record<string, unknown> } = {},
) {
  const res = await mf.dispatchFetch(`http://sluice.test${path}`, {
    method: init.method ?? "GET",
    headers: { "CF-Connecting-IP": init.ip ?? "203.0.113.1", ...init.headers },
    body: init.body,
    cf: init.cf,
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) as Record<string, unknown> };
}

/** `INFO commandstats` of the stack's Redis, as calls per command, read over RESP directly. */
export async function commandCalls(stack: RedisStack): Promise<Record<string, number>> {
  const { RespClient } = await import("../../dev/resp.js");
  const client = RespClient.fromUrl(stack.redis.url);
  try {
    const info = String(await client.send(["INFO", "commandstats"]));
    return Object.fromEntries([...info.matchAll(/cmdstat_([a-z|_-]+):calls=(\d+)/g)].map((m) => [m[1] as string, Number(m[2])]));
  } finally {
    client.close();
  }
}
