/*
 * Bounded queues (docs/shedding.md, queue): max_depth and max_age shed with the overflow answer,
 * a job past max_age is dropped to the dead-letter queue unsent, retry_delays sets the number of
 * retries, and the backlog figures rise and fall. workerd via Miniflare with real Queues, and the
 * real redis-server.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import type { JobMessage } from "../../src/features/shedding/queue/queue.js";
import { call, type DemoOrigin, sleep, useStack } from "./stack.js";

const ADMIN = "admin-token-for-queue-bounds-0123456789";
// one request an hour: the first goes through, the rest wait in the queue (a minute's delay) for the whole test
const hourly = [{ name: "hourly", key: "global", rate: 1, period: "1h" }];
const SLUICE: SluiceInput = {
  key_prefix: "qb",
  // decisions are Redis's, even on a loaded machine (the default 50 ms floor is meant for production)
  timeout_ms: 5_000,
  routes: [
    // one client fills it here: its share is the whole queue (by default a client holds a tenth)
    {
      name: "bounded",
      match: "/bounded",
      on_limit: "queue",
      queue: { max_depth: 3, max_per_client: 3 },
      limits: hourly,
    },
    {
      name: "cushioned",
      match: "/cushioned",
      on_limit: "queue",
      queue: { max_depth: 1 },
      fallback: { status: 200, content_type: "text/plain", body: "busy, try later" },
      limits: hourly,
    },
    { name: "aged", match: "/aged", on_limit: "queue", queue: { max_age: "1m" }, limits: hourly },
    {
      name: "hooked",
      match: "/hooked",
      on_limit: "queue",
      queue: { callbacks: ["https://hooks.example.com/*"] },
      limits: hourly,
    },
    {
      name: "drain",
      match: "/drain",
      on_limit: "queue",
      queue: { retry_delays: ["1s", "1s"] },
      limits: [{ name: "paced", key: "global", rate: 5, period: "1s", burst: 1 }],
    },
  ],
};

const rig = useStack({ sluice: SLUICE, queues: true, bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
let mf: Miniflare;
let origin: DemoOrigin;
beforeAll(() => {
  ({ mf, origin } = rig);
});

const post = (path: string, body = "x") => call(mf, path, { method: "POST", body });

/** `/__sluice/metrics`, as name{labels} → value. */
async function metrics(): Promise<Map<string, number>> {
  const r = await call(mf, "/__sluice/metrics", { headers: { authorization: `Bearer ${ADMIN}` } });
  expect(r.status).toBe(200);
  return new Map(
    r.text
      .split("\n")
      .filter((l) => l && !l.startsWith("#"))
      .map((l) => [l.slice(0, l.lastIndexOf(" ")), Number(l.slice(l.lastIndexOf(" ") + 1))]),
  );
}

describe("queue.max_depth", () => {
  it("sheds the 4th queued request with a 503 problem and Retry-After, counts it, and shows the depth", async () => {
    expect((await post("/bounded")).status).toBe(200); // the hour's one admission
    for (let i = 0; i < 3; i++) expect((await post("/bounded")).status).toBe(202);
    const shed = await post("/bounded");
    expect(shed.status).toBe(503);
    expect(shed.headers.get("content-type")).toBe("application/problem+json");
    expect(shed.json()).toMatchObject({ title: "Queue full", reason: "max_depth" });
    expect(Number(shed.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(shed.headers.get("ratelimit")).toMatch(/^"hourly";r=0;/);
    expect(shed.headers.get("sluice-decision")).toBe("reject");
    const m = await metrics();
    expect(m.get('sluice_queue_depth{route="bounded"}')).toBe(3);
    expect(m.get('sluice_queue_jobs_total{route="bounded",outcome="shed_depth"}')).toBe(1);
    expect(m.get('sluice_queue_oldest_job_age_ms{route="bounded"}')).toBeGreaterThanOrEqual(0);
    // the dashboard's queue panel reads the same figures
    const dashboard = await call(mf, "/__sluice/api/dashboard", { headers: { authorization: `Bearer ${ADMIN}` } });
    const queues = dashboard.json().queues as Array<Record<string, unknown>>;
    expect(queues.find((q) => q.route === "bounded")).toMatchObject({ depth: 3, max_depth: 3, shed_depth: 1 });
  });

  it("answers the overflow with the route's fallback page when it has one", async () => {
    expect((await post("/cushioned")).status).toBe(200);
    expect((await post("/cushioned")).status).toBe(202);
    const shed = await post("/cushioned");
    expect(shed.status).toBe(200);
    expect(shed.text).toBe("busy, try later");
    expect(shed.headers.get("sluice-decision")).toBe("fallback");
    expect((await metrics()).get('sluice_queue_jobs_total{route="cushioned",outcome="shed_depth"}')).toBe(1);
  });
});

describe("queue.max_age", () => {
  it("sheds at enqueue a request the limit would keep waiting past max_age", async () => {
    expect((await post("/aged")).status).toBe(200);
    const shed = await post("/aged"); // the hourly limit's retry-after is about an hour, max_age a minute
    expect(shed.status).toBe(503);
    expect(shed.json()).toMatchObject({ title: "Queue full", reason: "max_age" });
    expect((await metrics()).get('sluice_queue_jobs_total{route="aged",outcome="shed_age"}')).toBe(1);
  });

  it("drops a job older than max_age to the dead-letter queue instead of delivering it", async () => {
    // a job queued ten minutes ago (by the consumer's clock), past the route's max_age of one minute
    const id = crypto.randomUUID();
    const job: JobMessage = {
      id,
      route: "aged",
      region: "default",
      method: "POST",
      path: "/aged",
      matchPath: "/aged",
      search: "",
      ip: "203.0.113.7",
      headers: [["content-type", "text/plain"]],
      body: null,
      failures: 0,
      enqueuedAt: Date.now() - 10 * 60_000,
    };
    const queue = await mf.getQueueProducer<JobMessage>("SLUICE_QUEUE");
    await queue.send(job, { contentType: "json" });
    let status: Record<string, unknown> = {};
    for (let i = 0; i < 100 && status.dead_letter !== true; i++) {
      await sleep(100);
      const r = await call(mf, `/__sluice-jobs/${id}`);
      if (r.status === 200) status = r.json();
    }
    expect(status).toMatchObject({ status: "failed", expired: true, dead_letter: true, route: "aged" });
    expect(origin.seen.filter((s) => s.headers["sluice-job-id"] === id)).toHaveLength(0);
    expect((await metrics()).get('sluice_queue_jobs_total{route="aged",outcome="expired"}')).toBe(1);
  });
});

describe("retry_delays and the backlog figures", () => {
  it("retries as many times as retry_delays has entries, and the depth falls back to 0 as jobs are done", async () => {
    const sent = await Promise.all(Array.from({ length: 4 }, (_, i) => post("/drain?status=500", `d-${i}`)));
    const queued = sent.filter((r) => r.status === 202).map((r) => r.json().job_id as string);
    expect(queued.length).toBeGreaterThanOrEqual(2);
    const finished = async () => {
      const states = await Promise.all(queued.map(async (id) => (await call(mf, `/__sluice-jobs/${id}`)).json()));
      return states.every((s) => s.dead_letter === true);
    };
    for (let i = 0; i < 200 && !(await finished()); i++) await sleep(100);
    expect(await finished()).toBe(true);
    for (const id of queued)
      // the first delivery and one per entry of retry_delays
      expect(origin.seen.filter((s) => s.headers["sluice-job-id"] === id)).toHaveLength(3);
    const m = await metrics();
    expect(m.get('sluice_queue_depth{route="drain"}')).toBe(0);
    expect(m.get('sluice_queue_oldest_job_age_ms{route="drain"}')).toBe(0);
    expect(m.get('sluice_queue_jobs_total{route="drain",outcome="failed"}')).toBe(queued.length);
  });

  it("counts delivered jobs with their delivery lag", async () => {
    const sent = await Promise.all(Array.from({ length: 4 }, (_, i) => post("/drain", `ok-${i}`)));
    const queued = sent.filter((r) => r.status === 202).map((r) => r.json().job_id as string);
    expect(queued.length).toBeGreaterThanOrEqual(2);
    const delivered = async () =>
      (await Promise.all(queued.map(async (id) => (await call(mf, `/__sluice-jobs/${id}`)).json().status))).every(
        (s) => s === "delivered",
      );
    for (let i = 0; i < 200 && !(await delivered()); i++) await sleep(100);
    const m = await metrics();
    expect(m.get('sluice_queue_jobs_total{route="drain",outcome="delivered"}')).toBe(queued.length);
    expect(m.get('sluice_queue_delivery_lag_ms_count{route="drain"}')).toBe(queued.length);
    // the queue never delivers before the limit's retry-after rounded up to a second
    expect(m.get('sluice_queue_delivery_lag_ms_sum{route="drain"}')).toBeGreaterThanOrEqual(queued.length * 1_000);
    expect(m.get('sluice_queue_depth{route="drain"}')).toBe(0);
  });
});

describe("Sluice-Callback", () => {
  it.each([
    ["a host outside the allowlist", "https://evil.example.net/hook"],
    ["a host that only begins like an allowed one", "https://hooks.example.com.evil.net/hook"],
    ["plain http", "http://hooks.example.com/hook"],
    ["credentials in the URL", "https://user:pw@hooks.example.com/hook"],
    ["not a URL", "hooks.example.com/hook"],
  ])("refuses to queue a job whose callback is %s, with a 400 problem", async (_, url) => {
    await post("/hooked"); // the hour's one admission (later calls are refused by the limit)
    const r = await call(mf, "/hooked", { method: "POST", body: "x", headers: { "sluice-callback": url } });
    expect(r.status).toBe(400);
    expect(r.json()).toMatchObject({ title: "Callback not allowed" });
  });

  it("queues a job whose callback the route allows, and refuses any on a route without an allowlist", async () => {
    const ok = await call(mf, "/hooked", {
      method: "POST",
      body: "x",
      headers: { "sluice-callback": "https://hooks.example.com/jobs/1" },
    });
    expect(ok.status).toBe(202);
    const none = await call(mf, "/bounded", {
      method: "POST",
      body: "x",
      headers: { "sluice-callback": "https://hooks.example.com/jobs/1" },
    });
    expect(none.status).toBe(400);
  });
});
