/*
 * The queue consumer's retry schedule and the backlog counter, against the real redis-server and
 * the demo origin: the consumer (`onQueue`) is handed each message by the test, which plays the
 * queue, so the delays it asks for are read exactly, in order, without waiting them out.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { loadConfig, type Route } from "../../src/config/index.js";
import type { SluiceInput } from "../../src/config/schema.js";
import type { Env } from "../../src/env.js";
import { onQueue } from "../../src/features/shedding/queue/deliver.js";
import { enterQueue, leaveQueue, readBacklogs } from "../../src/features/shedding/queue/depth.js";
import type { JobMessage } from "../../src/features/shedding/queue/queue.js";
import { envConnections } from "../../src/region/index.js";
import { Runtime } from "../../src/runtime.js";
import type { Store } from "../../src/store/redis.js";
import { TOKEN, useStack } from "./stack.js";

const roomy = [{ name: "roomy", key: "global", rate: 1_000, period: "1s" }];
const SLUICE: SluiceInput = {
  key_prefix: "qc",
  // the consumer's decisions and job leases are Redis's, even on a loaded machine (the default
  // 50 ms floor is meant for production: a slower answer would send a job back to the queue)
  timeout_ms: 5_000,
  routes: [
    {
      name: "notify",
      match: "/notify",
      on_limit: "queue",
      queue: { retry_delays: ["1s", "5s", "30s", "5m", "30m"], callbacks: ["https://hooks.example.com/jobs/*"] },
      limits: roomy,
    },
    { name: "plain", match: "/plain", on_limit: "queue", limits: roomy },
    { name: "deep", match: "/deep", on_limit: "queue", queue: { max_depth: 5 }, limits: roomy },
  ],
};

const rig = useStack({ origin: {} });

/** A queue the test reads: what the consumer sent, with the delay it asked for. */
function recordingQueue() {
  const sent: Array<{ body: JobMessage; delaySeconds: number | undefined }> = [];
  const queue = {
    send: async (body: JobMessage, opts?: { delaySeconds?: number }) => {
      sent.push({ body, delaySeconds: opts?.delaySeconds });
    },
  };
  return { sent, queue: queue as unknown as Queue<unknown> };
}

/** One message as the platform hands it over, recording what the consumer did with it. */
function messageOf(body: JobMessage) {
  const outcome: { acked: boolean; retried: Array<number | undefined> } = { acked: false, retried: [] };
  const message = {
    id: body.id,
    timestamp: new Date(),
    body,
    attempts: 1,
    ack: () => void (outcome.acked = true),
    retry: (o?: { delaySeconds?: number }) => void outcome.retried.push(o?.delaySeconds),
  };
  return { message: message as unknown as Message<JobMessage>, outcome };
}

function jobFor(route: string, search = ""): JobMessage {
  return {
    id: crypto.randomUUID(),
    route,
    region: "default",
    method: "POST",
    path: `/${route}`,
    matchPath: `/${route}`,
    search,
    ip: "203.0.113.20",
    headers: [["content-type", "text/plain"]],
    body: null,
    failures: 0,
    enqueuedAt: Date.now(),
  };
}

/** Runs the consumer on `first`, then on every copy it sends back, as the queue would: the delays it asked for. */
async function playQueue(first: JobMessage) {
  const main = recordingQueue();
  const dlq = recordingQueue();
  const env: Env = {
    ORIGIN_URL: rig.origin.url,
    SLUICE,
    UPSTASH_REDIS_REST_URL: rig.stack.bridge.url,
    UPSTASH_REDIS_REST_TOKEN: TOKEN,
    SLUICE_QUEUE: main.queue,
    SLUICE_DLQ: dlq.queue,
  };
  const runtime = new Runtime();
  let next: JobMessage | undefined = first;
  for (let round = 0; next && round < 20; round++) {
    const { message, outcome } = messageOf(next);
    const work: Array<Promise<unknown>> = [];
    const batch = { queue: "sluice-shed", messages: [message], ackAll() {}, retryAll() {} };
    await onQueue(batch as unknown as MessageBatch<JobMessage>, env, (p) => void work.push(p), runtime);
    await Promise.all(work);
    expect(outcome.acked, "every copy is acked: a retry is a new copy").toBe(true);
    // each round sends at most one copy back: the next round takes it, none ends the play
    next = main.sent[round]?.body;
  }
  return { delays: main.sent.map((s) => s.delaySeconds), failures: main.sent.map((s) => s.body.failures), dlq };
}

const attemptsOf = (id: string) => rig.origin.seen.filter((s) => s.headers["sluice-job-id"] === id).length;

describe("queue.retry_delays", () => {
  it("waits each delay of the schedule in order, one retry per entry, then dead-letters the job", async () => {
    const job = jobFor("notify", "?status=500");
    const { delays, failures, dlq } = await playQueue(job);
    expect(delays).toEqual([1, 5, 30, 300, 1_800]);
    expect(failures).toEqual([1, 2, 3, 4, 5]);
    expect(dlq.sent.map((s) => [s.body.id, s.body.failures, s.body.deadLetter])).toEqual([[job.id, 6, true]]);
    expect(attemptsOf(job.id)).toBe(6);
  });

  it("keeps the schedule it had without retry_delays: max_retries = 3, after 1 s, 2 s, 4 s", async () => {
    const job = jobFor("plain", "?status=503");
    const { delays, dlq } = await playQueue(job);
    expect(delays).toEqual([1, 2, 4]);
    expect(dlq.sent.map((s) => s.body.failures)).toEqual([4]);
    expect(attemptsOf(job.id)).toBe(4);
  });
});

describe("the backlog counter (lua/queue-depth.lua)", () => {
  const config = () => {
    const loaded = loadConfig({ ORIGIN_URL: "http://origin.test", SLUICE });
    if (!loaded.ok) throw loaded.error;
    return loaded.config;
  };
  const storeOf = (): Store => {
    const c = config();
    const env: Env = { UPSTASH_REDIS_REST_URL: rig.stack.bridge.url, UPSTASH_REDIS_REST_TOKEN: TOKEN };
    return new Runtime().stores(envConnections(env, c.home_region), c).offPath() as Store;
  };
  const deep = () => config().routes.find((r) => r.name === "deep") as Route;

  it("admits exactly max_depth jobs when many isolates race for the last places, one script call each", async () => {
    const store = storeOf();
    const entered = await Promise.all(Array.from({ length: 40 }, () => enterQueue(store, "qc", deep(), 1_000)));
    expect(entered.filter((e) => e.admitted)).toHaveLength(5);
    expect(Math.max(...entered.map((e) => e.depth))).toBe(5);
    expect(await readBacklogs(store, "qc", ["deep"])).toEqual([{ depth: 5, headAt: 1_000 }]);
    // the key lives status_ttl (a day by default), renewed by each call: an idle route starts again from 0
    const [key] = (await rig.redis.keys("qc:queue:*")) as string[];
    expect(key).toMatch(/^qc:queue:[0-9a-f]{32}$/);
    expect(Number(await rig.redis.pttl(key as string))).toBeGreaterThan(86_000_000);
  });

  it("falls as jobs leave, moves the oldest job's time up, and never goes below 0", async () => {
    const store = storeOf();
    await leaveQueue(store, "qc", deep(), 2_000);
    expect(await readBacklogs(store, "qc", ["deep"])).toEqual([{ depth: 4, headAt: 2_000 }]);
    for (let i = 0; i < 6; i++) await leaveQueue(store, "qc", deep(), 3_000);
    expect(await readBacklogs(store, "qc", ["deep"])).toEqual([{ depth: 0, headAt: undefined }]);
    expect((await enterQueue(store, "qc", deep(), 9_000)).depth).toBe(1);
    expect(await readBacklogs(store, "qc", ["deep"])).toEqual([{ depth: 1, headAt: 9_000 }]);
  });
});

describe("completion callbacks", () => {
  const realFetch = globalThis.fetch;
  /** What the hook receiver got: the test's stand-in for an https endpoint outside this machine. */
  const hooks: Array<{ url: string; body: Record<string, unknown> }> = [];
  const receiveHooks = () =>
    vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
      const url = input instanceof Request ? input.url : String(input);
      if (!url.startsWith("https://hooks.example.com/")) return realFetch(input, init);
      hooks.push({ url, body: JSON.parse(String(init?.body)) as Record<string, unknown> });
      return new Response(null, { status: 204 });
    });
  afterEach(() => {
    vi.restoreAllMocks();
    hooks.length = 0;
  });

  it("tells the callback the job's outcome once: delivered, with the origin's status", async () => {
    receiveHooks();
    const job = { ...jobFor("notify"), callback: "https://hooks.example.com/jobs/42" };
    await playQueue(job);
    expect(hooks).toEqual([
      {
        url: "https://hooks.example.com/jobs/42",
        body: { job_id: job.id, route: "notify", failures: 0, status: "delivered", origin_status: 200 },
      },
    ]);
  });

  it("tells it once, after the last retry, when the job fails for good", async () => {
    receiveHooks();
    const job = { ...jobFor("notify", "?status=500"), callback: "https://hooks.example.com/jobs/43" };
    await playQueue(job);
    expect(hooks.map((h) => h.body)).toEqual([
      { job_id: job.id, route: "notify", failures: 6, status: "failed", origin_status: 500 },
    ]);
  });

  it("never calls a URL the route's allowlist does not name (checked again at delivery)", async () => {
    receiveHooks();
    await playQueue({ ...jobFor("plain"), callback: "https://hooks.example.com/jobs/44" });
    await playQueue({ ...jobFor("notify"), callback: "https://hooks.example.com/other" });
    expect(hooks).toEqual([]);
  });
});

describe("a batch", () => {
  it("is delivered several jobs at once, never more than 6 (what a Worker invocation holds open)", async () => {
    const env: Env = {
      ORIGIN_URL: rig.origin.url,
      SLUICE,
      UPSTASH_REDIS_REST_URL: rig.stack.bridge.url,
      UPSTASH_REDIS_REST_TOKEN: TOKEN,
      SLUICE_QUEUE: recordingQueue().queue,
    };
    // each delivery is held a second at the origin: one at a time, 8 jobs would take 8 s
    const jobs = Array.from({ length: 8 }, () => jobFor("plain", "?delay=1000"));
    const played = jobs.map(messageOf);
    const batch = { queue: "sluice-shed", messages: played.map((p) => p.message), ackAll() {}, retryAll() {} };
    const work: Array<Promise<unknown>> = [];
    await onQueue(batch as unknown as MessageBatch<JobMessage>, env, (p) => void work.push(p), new Runtime());
    await Promise.all(work);
    expect(played.every((p) => p.outcome.acked)).toBe(true);
    const ids = new Set(jobs.map((j) => j.id));
    const arrivals = rig.origin.seen.filter((s) => ids.has(String(s.headers["sluice-job-id"]))).map((s) => s.at);
    expect(arrivals).toHaveLength(8);
    // how many were at the origin at once: each stays 1 s from its arrival
    const most = Math.max(...arrivals.map((t) => arrivals.filter((u) => u <= t && t < u + 1_000).length));
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(6);
  });
});
