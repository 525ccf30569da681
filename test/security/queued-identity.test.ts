/*
 * Issue 29, finding 15: a queued job kept neither its JWT identity nor its host. The consumer
 * decided it without the claims (a `jwt:sub` limit fell back to the address, a fresh bucket:
 * deliveries past the user's rate; tiers and priority from claims lost) and told the origin
 * `X-Forwarded-Host: queued.sluice`. Replayed through the gateway in workerd, with Miniflare's
 * real Queues and a real Redis: the job is decided on the user's own bucket at the user's tier,
 * and forwarded with the host and scheme the client asked for.
 */
import { sign } from "hono/jwt";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import type { Env } from "../../src/env.js";
import { onQueue } from "../../src/features/shedding/queue/deliver.js";
import type { JobMessage } from "../../src/features/shedding/queue/queue.js";
import { Runtime } from "../../src/runtime.js";
import { sleep, TOKEN, useStack } from "../integration/stack.js";

const SECRET = "queued-identity-secret-0123456789abcdef";

const SLUICE: SluiceInput = {
  key_prefix: "qi",
  timeout_ms: 2_000,
  routes: [
    {
      name: "notify",
      match: "/notify",
      methods: ["POST"],
      on_limit: "queue",
      // one an hour, unless the token says `plan: pro`: then one every 5 s
      limits: [{ name: "per-user", key: "jwt:sub", rate: 1, period: "1h", tier: "jwt:plan", rates: { pro: "1/5s" } }],
    },
    {
      // half the site's two an hour is kept for `critical`, which the token's `prio` claim says
      name: "urgent",
      match: "/urgent",
      on_limit: "queue",
      priority: "jwt:prio",
      limits: [{ name: "site", key: "global", rate: 2, period: "1h", reserve: { critical: 0.5 } }],
    },
  ],
};

const rig = useStack({ sluice: SLUICE, queues: true, bindings: { SLUICE_JWT_SECRET: SECRET } });
let mf: Miniflare;
beforeAll(() => {
  mf = rig.mf;
});

const now = () => Math.floor(Date.now() / 1000);
const token = (claims: Record<string, unknown>) => sign({ exp: now() + 600, ...claims }, SECRET, "HS256");

/** A POST as Cloudflare delivers it, to the host and scheme the client used. */
async function post(url: string, auth: string, ip: string, body: string) {
  const res = await mf.dispatchFetch(url, {
    method: "POST",
    headers: { "CF-Connecting-IP": ip, authorization: `Bearer ${auth}`, "content-type": "text/plain" },
    body,
  });
  const text = await res.text();
  return { status: res.status, decision: res.headers.get("sluice-decision"), text };
}

async function jobStatus(id: string): Promise<Record<string, unknown>> {
  const res = await mf.dispatchFetch(`https://orders.example.com/__sluice-jobs/${id}`);
  return (await res.json()) as Record<string, unknown>;
}

describe("a queued job is decided and forwarded as its live request would have been", () => {
  it("takes the user's own bucket at the token's tier, and tells the origin the client's host and scheme", async () => {
    const alice = await token({ sub: "alice", plan: "pro", email: "alice@example.com" });
    // the tier's one token of the 5 s: admitted at once
    const first = await post("https://orders.example.com/notify", alice, "203.0.113.50", "first");
    expect(first.status).toBe(200);
    // the second waits for alice's next token, about 5 s from now
    const queued = await post("https://orders.example.com/notify", alice, "203.0.113.50", "queued");
    expect(queued.status).toBe(202);
    const id = JSON.parse(queued.text).job_id as string;

    // polled, with a generous cap: the queue hands the job over after the limit's retry-after (5 s)
    let status: Record<string, unknown> = {};
    for (let i = 0; i < 300 && status.status !== "delivered"; i++) {
      await sleep(100);
      status = await jobStatus(id);
    }
    // at the token's tier (1 per 5 s): at the limit's own rate of one an hour it would still wait
    expect(status).toMatchObject({ status: "delivered", origin_status: 200 });

    // the delivery took alice's token: her next request, sent at once, is refused (queued), not
    // admitted from a bucket the job never touched (on main the job was charged to a fresh bucket
    // of the address, and this request went straight through)
    const next = await post("https://orders.example.com/notify", alice, "203.0.113.50", "next");
    expect(next.decision).toBe("queued");
    expect(next.status).toBe(202);

    const delivered = rig.origin.seen.find((s) => s.headers["sluice-job-id"] === id);
    expect(delivered?.body).toBe("queued");
    expect(delivered?.headers["x-forwarded-host"]).toBe("orders.example.com");
    expect(delivered?.headers["x-forwarded-proto"]).toBe("https");
    expect(delivered?.headers.forwarded).toBe('for=203.0.113.50;host="orders.example.com";proto=https');
    expect(delivered?.headers["x-forwarded-for"]).toBe("203.0.113.50");
  });

  it("keeps the host and scheme of a plain http request", async () => {
    const bob = await token({ sub: "bob", plan: "pro" });
    expect((await post("http://plain.example.net/notify", bob, "203.0.113.51", "b1")).status).toBe(200);
    const queued = await post("http://plain.example.net/notify", bob, "203.0.113.51", "b2");
    expect(queued.status).toBe(202);
    const id = JSON.parse(queued.text).job_id as string;
    let status: Record<string, unknown> = {};
    for (let i = 0; i < 300 && status.status !== "delivered"; i++) {
      await sleep(100);
      status = await jobStatus(id);
    }
    expect(status.status).toBe("delivered");
    const delivered = rig.origin.seen.find((s) => s.headers["sluice-job-id"] === id);
    expect(delivered?.headers["x-forwarded-host"]).toBe("plain.example.net");
    expect(delivered?.headers["x-forwarded-proto"]).toBe("http");
  });
});

describe("the priority a job's claims name", () => {
  /** One job through the consumer (as the queue hands it over), against the stack's Redis and origin: what it did with it. */
  async function consume(job: JobMessage) {
    const sent: JobMessage[] = [];
    const queue = { send: async (body: JobMessage) => void sent.push(body) } as unknown as Queue<unknown>;
    const env: Env = {
      ORIGIN_URL: rig.origin.url,
      SLUICE,
      SLUICE_JWT_SECRET: SECRET,
      UPSTASH_REDIS_REST_URL: rig.stack.bridge.url,
      UPSTASH_REDIS_REST_TOKEN: TOKEN,
      SLUICE_QUEUE: queue,
    } as Env;
    const outcome = { acked: false };
    const message = {
      id: job.id,
      timestamp: new Date(),
      body: job,
      attempts: 1,
      ack: () => (outcome.acked = true),
      retry() {},
    };
    const work: Array<Promise<unknown>> = [];
    const batch = { queue: "sluice-shed", messages: [message], ackAll() {}, retryAll() {} };
    await onQueue(batch as unknown as MessageBatch<JobMessage>, env, (p) => void work.push(p), new Runtime());
    await Promise.all(work);
    return {
      acked: outcome.acked,
      sentBack: sent.length,
      reached: rig.origin.seen.some((s) => s.headers["sluice-job-id"] === job.id),
    };
  }
  const job = (claims?: Record<string, string>): JobMessage => ({
    id: crypto.randomUUID(),
    route: "urgent",
    region: "default",
    method: "POST",
    path: "/urgent",
    matchPath: "/urgent",
    search: "",
    ip: "203.0.113.60",
    host: "orders.example.com",
    proto: "https",
    ...(claims ? { claims } : {}),
    headers: [["content-type", "text/plain"]],
    body: null,
    failures: 0,
    enqueuedAt: Date.now(),
  });

  it("a critical job takes the capacity kept for critical; without the claim it would wait an hour", async () => {
    // a default job takes the one token default may use
    expect(await consume(job())).toMatchObject({ reached: true, sentBack: 0 });
    // the second token is kept for critical: a default job is sent back for later
    expect(await consume(job())).toMatchObject({ reached: false, sentBack: 1, acked: true });
    // the job whose verified claims said critical is delivered from it (on main its claims were
    // not kept: it was decided as default and sent back)
    expect(await consume(job({ prio: "critical" }))).toMatchObject({ reached: true, sentBack: 0, acked: true });
  });
});
