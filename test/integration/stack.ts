import { Redis } from "@upstash/redis";
import { Miniflare } from "miniflare";
import { afterAll, beforeAll, inject } from "vitest";
import {
  startBridge,
  type Bridge,
  startOrigin,
  type DemoOrigin,
  startRedis,
  type RedisProcess,
  RespClient,
  type ScriptTime,
} from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";

export const TOKEN = "test-token";

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A real redis-server (spawned on a free port) behind the project's Upstash-REST bridge. */
export interface RedisStack {
  redis: RedisProcess;
  bridge: Bridge;
  stop(): Promise<void>;
}

/** `scriptTime: "refuse"`: the bridge refuses TIME inside scripts, as ElastiCache Serverless does. */
export async function startRedisStack(opts: { scriptTime?: ScriptTime } = {}): Promise<RedisStack> {
  const redis = await startRedis();
  const bridge = await startBridge({ redisUrl: redis.url, token: TOKEN, scriptTime: opts.scriptTime });
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
export function fileRedis(): Pick<StackRig, "stack" | "redis"> {
  return useStack({ origin: false });
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
  /** Receives the Worker's standard output (its log lines), which is dropped otherwise. */
  stdout?: (text: string) => void;
  /** Receives the Worker's standard error (its failure lines: `logFailure`, `logError`), dropped otherwise. */
  stderr?: (text: string) => void;
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
    ...(process.env.SLUICE_TEST_LOGS && !opts.stdout && !opts.stderr
      ? {}
      : {
          handleRuntimeStdio: (out: NodeJS.ReadableStream, err: NodeJS.ReadableStream) => {
            if (opts.stdout) out.on("data", (chunk: Buffer) => opts.stdout?.(chunk.toString()));
            else out.resume();
            if (opts.stderr) err.on("data", (chunk: Buffer) => opts.stderr?.(chunk.toString()));
            else err.resume();
          },
        }),
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

/** What a file or describe block needs around its tests; see {@link useStack}. */
export interface UseStackOptions {
  /** The Worker's config. Without it no Worker starts here (a test can still start one with `worker()`). */
  sluice?: SluiceInput | string;
  bindings?: Record<string, string>;
  queues?: boolean;
  listen?: boolean;
  /** Identical Workers of that config against the one Redis, as several edge isolates; 1 by default. */
  instances?: number;
  /** The demo origin's options, or false for none (the overload below takes an origin of the file's own). */
  origin?: Parameters<typeof startOrigin>[0] | false;
  /** Use this Redis stack (the file's, from an outer useStack) instead of starting one; it is left running. */
  stack?: () => RedisStack;
  /** The bridge of the stack started here refuses TIME inside scripts ("refuse"), as ElastiCache Serverless does. */
  scriptTime?: ScriptTime;
}

/** Anything `useStack` can shut down after the tests. */
export interface Closable {
  url: string;
  close(): Promise<void>;
}

/** The started pieces; each field throws if read before the hooks have run (at collection time). */
export interface StackRig<O extends Closable = DemoOrigin> {
  readonly stack: RedisStack;
  readonly origin: O;
  /** The first (usually the only) Worker of `sluice`. */
  readonly mf: Miniflare;
  /** All `instances` Workers of `sluice`. */
  readonly workers: readonly Miniflare[];
  /** An Upstash client through the stack's bridge, replies as Redis sent them. */
  readonly redis: Redis;
  /**
   * One more Worker on this Redis and origin (override either in `opts`), disposed with the rest.
   * Nothing of the `sluice` Worker's options is inherited: give its bindings again if it needs them.
   */
  worker(opts: Omit<WorkerOptions, "origin"> & Partial<Pick<WorkerOptions, "origin">>): Miniflare;
}

/**
 * Registers beforeAll/afterAll hooks where it is called (a file's top level, or a describe block)
 * that start a Redis stack, an origin and the Workers of `sluice` (ready before the first test),
 * and dispose the Workers, then stop the rest, after the last one.
 *
 * @example
 * const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
 * it("...", async () => expect((await call(rig.mf, "/x")).status).toBe(200));
 */
export function useStack(opts?: UseStackOptions): StackRig;
/** With an origin the file starts itself (`origin.url` is where the Workers forward). */
export function useStack<O extends Closable>(
  opts: Omit<UseStackOptions, "origin"> & { origin: () => Promise<O> },
): StackRig<O>;
export function useStack(
  opts: Omit<UseStackOptions, "origin"> & { origin?: UseStackOptions["origin"] | (() => Promise<Closable>) } = {},
): StackRig<Closable> {
  let stack: RedisStack | undefined;
  let origin: Closable | undefined;
  let redis: Redis | undefined;
  const workers: Miniflare[] = [];
  // Workers from `worker()`: kept apart so that `workers` stays the `sluice` instances only
  const extras: Miniflare[] = [];
  const ownsStack = opts.stack === undefined;

  const started = <T>(v: T | undefined, what: string): T => {
    if (v === undefined) throw new Error(`useStack: ${what} is started in beforeAll (and only if asked for)`);
    return v;
  };
  const startAnOrigin = (): Promise<Closable | undefined> => {
    if (opts.origin === false) return Promise.resolve(undefined);
    if (typeof opts.origin === "function") return opts.origin();
    return startOrigin(opts.origin);
  };

  const rig: StackRig<Closable> = {
    get stack() {
      return started(stack, "the Redis stack");
    },
    get origin() {
      return started(origin, "the origin");
    },
    get mf() {
      return started(workers[0], "the sluice Worker");
    },
    get workers() {
      return workers;
    },
    get redis() {
      redis ??= new Redis({
        url: rig.stack.bridge.url,
        token: TOKEN,
        enableTelemetry: false,
        automaticDeserialization: false,
      });
      return redis;
    },
    worker(w) {
      // an explicit `redisRestUrl: undefined` is a Worker with no Redis configured
      const redisRestUrl = "redisRestUrl" in w ? w.redisRestUrl : rig.stack.bridge.url;
      const mf = startWorker({ ...w, origin: w.origin ?? rig.origin.url, redisRestUrl });
      extras.push(mf);
      return mf;
    },
  };

  beforeAll(async () => {
    // settled one by one, so that what did start is stopped in afterAll when the other fails
    const [s, o] = await Promise.allSettled([
      opts.stack ? Promise.resolve(opts.stack()) : startRedisStack({ scriptTime: opts.scriptTime }),
      startAnOrigin(),
    ]);
    if (s.status === "fulfilled") stack = s.value;
    if (o.status === "fulfilled") origin = o.value;
    if (s.status === "rejected") throw s.reason;
    if (o.status === "rejected") throw o.reason;
    if (opts.sluice === undefined) return;
    const { sluice, bindings, queues, listen } = opts;
    for (let i = 0; i < (opts.instances ?? 1); i++) {
      workers.push(
        startWorker({ sluice, origin: rig.origin.url, redisRestUrl: rig.stack.bridge.url, bindings, queues, listen }),
      );
    }
    await Promise.all(workers.map((w) => w.ready));
  });
  afterAll(async () => {
    const disposed = await Promise.allSettled([...workers, ...extras].map((w) => w.dispose()));
    const stopped = await Promise.allSettled([ownsStack ? stack?.stop() : undefined, origin?.close()]);
    const failed = [...disposed, ...stopped].find((r) => r.status === "rejected");
    if (failed) throw failed.reason;
  });
  return rig;
}

/** A request as Cloudflare would deliver it: from a given client IP, at a given place. */
export async function call(
  mf: Miniflare,
  path: string,
  init: {
    method?: string;
    ip?: string;
    headers?: Record<string, string>;
    body?: string;
    cf?: Record<string, unknown>;
  } = {},
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
  const client = RespClient.fromUrl(stack.redis.url);
  try {
    const info = String(await client.send(["INFO", "commandstats"]));
    return Object.fromEntries(
      [...info.matchAll(/cmdstat_([a-z|_-]+):calls=(\d+)/g)].map((m) => [m[1] as string, Number(m[2])]),
    );
  } finally {
    client.close();
  }
}
