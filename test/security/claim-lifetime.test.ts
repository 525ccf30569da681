/**
 * Issue 29, finding 1: an in-flight claim must live as long as its call. The record's TTL was set
 * at the claim (`ttl`, a derive window of 3 s) and renewal moved only the lease, so the record
 * vanished while the origin was still working (or its late answer awaited, or its job queued):
 * the duplicate that came after the window was forwarded as new, two orders, two SMS. Now an
 * in-flight record lives as long as its claim, `ttl` counts from the answer, a queued job's claim
 * lives as long as the job, the consumer delivers only while the claim is its job's, and a window
 * shorter than the route's `origin_timeout` is refused at load.
 *
 * The review of those fixes found a queued job's claim still freed, or its job sent twice, after its
 * delivery had begun: a copy of the job that met `giveBack` (past `max_age`, its route gone, its lock
 * lost) released the claim with the plain `release`, whatever a copy before it had sent; and a 5xx
 * was retried on a route whose `on_origin_error = "hold"` says a 5xx may have acted. Now a job's
 * guards are given back only while no delivery of it began (`release_unsent`), and under `hold` a
 * 5xx settles the key indeterminate and fails the job without a retry.
 */
import { readFileSync } from "node:fs";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, useStack } from "../integration/stack.js";
import { startSickOrigin, type SickOrigin } from "../support/sick-origin.js";
import { idempotencyRecords, isScriptOp, pollUntil, redisNowMs, untilRedisPast } from "../support/guard-records.js";

const ADMIN = "claim-lifetime-admin-token-0123";
const PREFIX = "cl";
const derive = { fields: ["/to", "/text"], window: "3s" };
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  // about guards, not latency: a loaded machine must not turn claims into 503s
  timeout_ms: 5_000,
  routes: [
    // the attack: a 3 s window, the origin's answer awaited past a 1 s origin_timeout
    { name: "late", match: "/late/*", methods: ["POST"], origin_timeout: "1s", idempotency: { derive, lease: "1s" } },
    {
      name: "sms",
      match: "/sms/*",
      methods: ["POST"],
      origin_timeout: "1s",
      on_limit: "queue",
      limits: [{ name: "provider", key: "global", rate: 1, period: "8s", burst: 1 }],
      idempotency: { derive, lease: "1s" },
    },
    {
      name: "resolved",
      match: "/resolved/*",
      methods: ["POST"],
      on_limit: "queue",
      limits: [{ name: "provider", key: "global", rate: 1, period: "4s", burst: 1 }],
      idempotency: { lease: "1s" },
    },
    // a copy of a job redelivered past max_age is given back (expire)
    {
      name: "expiring",
      match: "/expiring/*",
      methods: ["POST"],
      on_limit: "queue",
      queue: { max_age: "8s" },
      limits: [{ name: "provider", key: "global", rate: 1, period: "1s", burst: 1 }],
      idempotency: { required: true },
    },
    // a 5xx may have acted here: the live path holds the key, failover does not resend it
    {
      name: "held",
      match: "/held/*",
      methods: ["POST"],
      on_limit: "queue",
      queue: { retry_delays: ["1s"] },
      limits: [{ name: "provider", key: "global", rate: 1, period: "1s", burst: 1 }],
      idempotency: { required: true, on_origin_error: "hold" },
    },
  ],
};

const rig = useStack({
  sluice: SLUICE,
  queues: true,
  bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
  origin: startSickOrigin,
});
let origin: SickOrigin;
let mf: Miniflare;
beforeAll(() => {
  ({ origin, mf } = rig);
});

type Answer = Awaited<ReturnType<typeof call>>;
const post = (path: string, body: string, headers: Record<string, string> = {}) =>
  call(mf, path, {
    method: "POST",
    ip: "203.0.113.60",
    body,
    headers: { "content-type": "application/json", ...headers },
  });
const show = (r: Answer) =>
  `${r.status} ${r.headers.get("sluice-decision")} replayed=${r.headers.get("idempotent-replayed")} ${r.text.slice(0, 200)}`;
const seen = (body: string) => origin.seen.filter((s) => s.body === body).length;
/** The route's latest claim (the highest fencing token). */
const recordOf = async (route: string) =>
  (await idempotencyRecords(rig.redis, PREFIX, route)).sort(
    (a, b) => Number(b.fields.fence) - Number(a.fields.fence),
  )[0];
/** When the claim was granted (its fencing token is Redis's clock in µs then), in ms. */
const claimedAt = async (route: string) => Math.floor(Number((await recordOf(route))?.fields.fence) / 1000);
async function jobStatus(location: string): Promise<string | undefined> {
  const r = await call(mf, location);
  return r.status === 200 ? (r.json().status as string) : undefined;
}

describe("finding 1: an in-flight claim lives as long as its call", () => {
  it("refuses at load a derive.window shorter than the route's origin_timeout, naming the field", async () => {
    const w = rig.worker({
      sluice: {
        routes: [
          { name: "short", match: "/x", idempotency: { derive: { fields: ["/a"], window: "3s" }, lease: "1s" } },
        ],
      },
      bindings: { SLUICE_ADMIN_TOKEN: "claim-lifetime-admin" },
    });
    const r = await call(w, "/x", { method: "POST", body: '{"a":1}' });
    expect(r.status, r.text).toBe(500);
    // a client is told only that the configuration is invalid; the operator, with the token, the field
    const told = await call(w, "/__sluice/health", { headers: { authorization: "Bearer claim-lifetime-admin" } });
    expect(told.status, told.text).toBe(500);
    expect(told.json().field).toBe("SLUICE.routes[0].idempotency.derive.window");
    expect(String(told.json().detail)).toMatch(/derive\.window: must be at least the route's origin_timeout/);
  });

  it("a duplicate after the window, while the late answer is awaited, is refused; then it replays that answer: one order", async () => {
    const body = JSON.stringify({ to: "+15550101", text: "order 1" });
    origin.hold();
    const first = await post("/late/hold", body);
    expect(first.status, show(first)).toBe(504);
    // the window (3 s from the claim, as the record's TTL was) is over; the origin still works
    await untilRedisPast(rig.redis, (await claimedAt("late")) + 3_500);
    const dup = await post("/late/hold", body);
    expect(dup.status, `a duplicate while the first is in flight must not run: ${show(dup)}`).toBe(409);
    expect(seen(body)).toBe(1);

    origin.release();
    const done = await pollUntil(
      () => recordOf("late"),
      (r) => r?.fields.state === "completed",
    );
    expect(done?.fields.state).toBe("completed");
    // the window runs from the answer: a retry now replays it
    const retry = await post("/late/hold", body);
    expect(retry.headers.get("idempotent-replayed"), show(retry)).toBe("true");
    expect(seen(body)).toBe(1);
  }, 60_000);

  it("on a queue route, a queued job's claim lives as long as the job: the retry after the window is refused, one SMS", async () => {
    origin.release();
    const spend = await post("/sms/a", JSON.stringify({ to: "+15550199", text: "spend the token" }));
    expect(spend.headers.get("sluice-decision"), show(spend)).toBe("allow");
    const body = JSON.stringify({ to: "+15550102", text: "your code is 4711" });
    const first = await post("/sms/a", body);
    expect(first.status, show(first)).toBe(202);
    await untilRedisPast(rig.redis, (await claimedAt("sms")) + 3_500);
    const retry = await post("/sms/a", body);
    expect(
      [409, 200],
      `the retry of a queued SMS must be refused (or replay it once delivered), never queued again: ${show(retry)}`,
    ).toContain(retry.status);
    const location = first.headers.get("location") as string;
    const final = await pollUntil(
      () => jobStatus(location),
      (s) => s === "delivered" || s === "failed",
      40_000,
    );
    expect(final).toBe("delivered");
    expect(seen(body)).toBe(1);
  }, 60_000);

  it("the consumer delivers a job only while its claim is still the job's: a key an operator resolved meanwhile is not sent", async () => {
    origin.release();
    const spend = await post("/resolved/b", "{}", { "idempotency-key": "spend" });
    expect(spend.headers.get("sluice-decision"), show(spend)).toBe("allow");
    const body = JSON.stringify({ order: "resolved-1" });
    const queued = await post("/resolved/b", body, { "idempotency-key": "resolved-1" });
    expect(queued.status, show(queued)).toBe(202);
    // the operator settles the key by hand while the job waits (the order was placed another way)
    const record = await recordOf("resolved");
    const resolve = await call(mf, "/__sluice/idempotency/resolve", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${ADMIN}` },
      body: JSON.stringify({
        route: "resolved",
        key: record?.hash,
        action: "replay",
        status: 201,
        body: '{"by":"operator"}',
      }),
    });
    expect(resolve.status, resolve.text).toBe(200);
    const location = queued.headers.get("location") as string;
    const final = await pollUntil(
      () => jobStatus(location),
      (s) => s === "delivered" || s === "failed",
      40_000,
    );
    expect(final, "the job's claim is no longer its own: it must not be delivered").toBe("failed");
    expect(seen(body)).toBe(0);
    const dup = await post("/resolved/b", body, { "idempotency-key": "resolved-1" });
    expect([dup.status, dup.text]).toEqual([201, '{"by":"operator"}']);
  }, 60_000);
});

describe("a queued job's guards once its delivery began", () => {
  const keyed = (path: string, key: string, body: string) =>
    call(mf, path, {
      method: "POST",
      ip: "203.0.113.91",
      body,
      headers: { "content-type": "application/json", "idempotency-key": key },
    });
  const jobFinal = (location: string) =>
    pollUntil(
      async () => {
        const r = await call(mf, location);
        return r.status === 200 ? (r.json() as { status?: string; expired?: boolean }) : undefined;
      },
      (j) => j?.status === "failed" || j?.status === "delivered",
      50_000,
    );
  /** The bridge command `c` runs idempotency.lua's `op` on one of `route`'s records. */
  const opOn = (c: string[], op: string, route: string) =>
    isScriptOp(c, op) && (c[3] ?? "").startsWith(`${PREFIX}:idem:${route}:`);

  it("a copy redelivered past max_age does not free a claim whose delivery started: the client's retry is refused, one SMS", async () => {
    origin.release();
    expect((await keyed("/expiring/a", "spend", "{}")).headers.get("sluice-decision")).toBe("allow");
    const body = JSON.stringify({ to: "+15550133", text: "code 1234" });
    // the delivery is answered 200, then its settle store fails: its completion and its hold are
    // lost, then its status write (the queue hands the job out again), and the copy is past max_age
    const bridge = rig.stack.bridge;
    bridge.dropNext({ match: (c) => opOn(c, "complete", "expiring"), times: 50 });
    bridge.dropNext({ match: (c) => opOn(c, "hold", "expiring"), times: 50 });
    bridge.dropNext({
      match: (c) =>
        (c[0] ?? "").toLowerCase() === "set" &&
        c.some((a) => a.includes('"status":"delivered"') && a.includes('"route":"expiring"')),
      times: 50,
    });
    const queued = await keyed("/expiring/a", "r2-sms", body);
    expect(queued.status, show(queued)).toBe(202);
    const final = await jobFinal(queued.headers.get("location") as string);
    expect(seen(body), "the job reached the origin once").toBe(1);
    expect(final).toMatchObject({ status: "failed", expired: true });
    // the SMS went out; the client retries its key
    const retry = await keyed("/expiring/a", "r2-sms", body);
    await pollUntil(
      async () => seen(body),
      (n) => n > 1,
      10_000,
    );
    expect(seen(body), `the retry must be refused (409), never sent again: it answered ${show(retry)}`).toBe(1);
    expect(retry.status).toBe(409);
  }, 90_000);

  it('a 5xx under on_origin_error = "hold" is not sent again: the key is held indeterminate, the job failed', async () => {
    origin.release();
    expect((await keyed("/held/ok", "spend", "{}")).headers.get("sluice-decision")).toBe("allow");
    const body = JSON.stringify({ charge: "r3" });
    const queued = await keyed("/held/fail", "r3-pay", body);
    expect(queued.status, show(queued)).toBe(202);
    const final = await jobFinal(queued.headers.get("location") as string);
    expect(seen(body), "a 5xx the route holds as may-have-acted must not be sent again").toBe(1);
    expect(final).toMatchObject({ status: "failed", indeterminate: true });
    const dup = await keyed("/held/fail", "r3-pay", body);
    expect(dup.status, show(dup)).toBe(409);
    expect(dup.json()).toMatchObject({ title: "Outcome indeterminate" });
    expect(seen(body)).toBe(1);
  }, 60_000);
});

describe("a lapsed claim is taken over only where nothing can have reached the origin", () => {
  const script = () => rig.redis.scriptLoad(readFileSync("lua/idempotency.lua", "utf8"));
  const run = async (key: string, op: string, owner: string, ...rest: Array<string | number>) =>
    (await rig.redis.evalsha(
      await script(),
      [`${PREFIX}:idem:lua:${key}`, `${PREFIX}:idem:lua:fence`, `${PREFIX}:ledger`, `${PREFIX}:idem:lua:replays:-`],
      [op, owner, "lua", key, 1000, ...rest, "{}"],
    )) as unknown[];
  const claimAs = (key: string, owner: string) => run(key, "claim", owner, "fp", 300, 60_000, 1_000_000, 1);
  const untilLapsed = async () => untilRedisPast(rig.redis, (await redisNowMs(rig.redis)) + 600);

  it("a queued job's claim whose delivery never started is taken over; once started, it lapses into indeterminate", async () => {
    expect((await claimAs("never-started", "job:a"))[0]).toBe("claimed");
    await untilLapsed();
    expect(await claimAs("never-started", "live-b")).toEqual(["claimed", expect.anything(), 1]);
    // the job's consumer finds its claim gone to another: it does not deliver
    expect(await run("never-started", "start", "job:a", 30_000)).toEqual(["not_owner"]);

    expect((await claimAs("started", "job:c"))[0]).toBe("claimed");
    expect(await run("started", "start", "job:c", 300)).toEqual(["ok"]);
    // a redelivered copy of the job never starts it twice
    expect(await run("started", "start", "job:c", 300)).toEqual(["sent"]);
    await untilLapsed();
    expect((await claimAs("started", "live-d"))[0]).toBe("indeterminate");
    // the holder's answer, when it comes, is still the key's best news
    expect(await run("started", "complete", "job:c", 201, "[]", "", 1, 60_000)).toEqual(["ok"]);
    expect((await claimAs("started", "live-d"))[0]).toBe("completed");
  });
});
