/**
 * REVIEW (h-review, adversarial read of issue 29's fixes): sequences that still free a key while
 * the origin may be acting. Each `it` here FAILS on main at e95bf24; the lead decides the fixes.
 *
 * R1. A claim's record lives `lease + ttl` from the last renewal that *landed* (and `ttl` from a
 *     lapse). A holder that is alive but cut off from Redis (the case lost-completion.test.ts
 *     plays) goes on with its call (up to origin_timeout + 25 s of late answer), but its record
 *     expires after lease + ttl: the next duplicate finds nothing, is claimed and forwarded while
 *     the first call still runs at the origin. Two orders. The same once a duplicate lapsed the
 *     claim: the lapse keeps the record `ttl` from the lapse, not from the call's end.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import { startBridge, type Bridge } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, TOKEN, useStack } from "../integration/stack.js";
import { startSickOrigin, type SickOrigin } from "../support/sick-origin.js";
import { idempotencyRecords, pollUntil } from "../support/guard-records.js";

const PREFIX = "rgl";
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  timeout_ms: 5_000,
  routes: [
    {
      name: "orders",
      match: "/orders/*",
      methods: ["POST"],
      // valid at load: ttl >= origin_timeout, lease < ttl
      origin_timeout: "3s",
      idempotency: { lease: "1s", ttl: "3s" },
    },
  ],
};

const rig = useStack({ sluice: SLUICE, origin: startSickOrigin });
let origin: SickOrigin;
let mf: Miniflare;
beforeAll(() => {
  ({ origin, mf } = rig);
});

const post = (w: Miniflare, path: string, key: string) =>
  call(w, path, {
    method: "POST",
    ip: "203.0.113.90",
    body: JSON.stringify({ order: key }),
    headers: { "content-type": "application/json", "idempotency-key": key },
  });
const orders = (key: string) => origin.seen.filter((s) => s.headers["idempotency-key"] === key).length;

describe("REVIEW R1: a live holder cut off from Redis", () => {
  let cutOff: Bridge;
  let holder: Miniflare;
  beforeAll(async () => {
    cutOff = await startBridge({ redisUrl: rig.stack.redis.url, token: TOKEN });
    holder = rig.worker({ sluice: SLUICE, redisRestUrl: cutOff.url });
    return () => cutOff.close();
  });

  it("its record must not vanish while its call may still run: the duplicate after lease + ttl is forwarded (two orders)", async () => {
    origin.hold();
    const first = post(holder, "/orders/hold", "r1-cut");
    await pollUntil(
      async () => orders("r1-cut"),
      (n) => n === 1,
    );
    // the holder's isolate loses Redis; its call goes on (the origin still holds it)
    cutOff.setMode("refuse");
    // nothing renews the record now: wait for Redis to drop it (lease 1 s + ttl 3 s after the last renewal)
    const records = await pollUntil(
      () => idempotencyRecords(rig.redis, PREFIX, "orders"),
      (r) => r.length === 0,
      20_000,
    );
    expect(origin.holding, "the first call is still at the origin").toBe(1);
    expect(records.length, "the in-flight record is gone while its call is still at the origin").toBe(0);
    // a duplicate through a healthy isolate: it must be refused (409), never forwarded
    const dup = post(mf, "/orders/hold", "r1-cut");
    const seenDup = await pollUntil(
      async () => orders("r1-cut"),
      (n) => n > 1,
      5_000,
    );
    origin.release();
    const [, d] = await Promise.all([first, dup]);
    cutOff.setMode("normal");
    expect(seenDup, `the origin got the key twice while the first call ran (duplicate answered ${d.status})`).toBe(1);
  }, 60_000);

  it("nor once lapsed: the lapse keeps the record `ttl` from the lapse, and the call outlives it (two orders)", async () => {
    origin.hold();
    const first = post(holder, "/orders/hold", "r1-lapse");
    await pollUntil(
      async () => orders("r1-lapse"),
      (n) => n === 1,
    );
    cutOff.setMode("refuse");
    // the lease (1 s) runs out unrenewed: the duplicate finds it lapsed and is refused, as it must be
    const lapsed = await pollUntil(
      () => post(mf, "/orders/hold", "r1-lapse"),
      (r) => r.status === 409 && String(r.json().title) === "Outcome indeterminate",
      20_000,
    );
    expect(lapsed.status).toBe(409);
    // `ttl` (3 s) after the lapse the record is gone, while the first call is still at the origin
    await pollUntil(
      () => idempotencyRecords(rig.redis, PREFIX, "orders"),
      (r) => r.length === 0,
      20_000,
    );
    expect(origin.holding, "the first call is still at the origin").toBe(1);
    const third = post(mf, "/orders/hold", "r1-lapse");
    const n = await pollUntil(
      async () => orders("r1-lapse"),
      (k) => k > 1,
      5_000,
    );
    origin.release();
    const [, t] = await Promise.all([first, third]);
    cutOff.setMode("normal");
    expect(n, `the origin got the key twice while the first call ran (third answered ${t.status})`).toBe(1);
  }, 60_000);
});

/**
 * R2. A queued job's copy that meets `giveBack` (past `max_age`: expire; the route gone; its
 *     session lock lost) releases the job's claim with the plain `release` op, which deletes any
 *     record the job's owner holds: also one whose delivery started (`sent`) and may have reached
 *     the origin. Sequence: the delivery is answered 200, the settle store fails (completion and
 *     hold lost, then the status write: the copy is retried by the queue), the redelivered copy is
 *     past `max_age`: expire → giveBack → release → the key is free; the client's retry runs.
 */
const QUEUED: SluiceInput = {
  key_prefix: "rgq",
  timeout_ms: 5_000,
  routes: [
    {
      name: "sms",
      match: "/sms/*",
      methods: ["POST"],
      on_limit: "queue",
      queue: { max_age: "8s" },
      limits: [{ name: "provider", key: "global", rate: 1, period: "1s", burst: 1 }],
      idempotency: { required: true },
    },
  ],
};

describe("REVIEW R2: a redelivered job past max_age", () => {
  const q = useStack({ sluice: QUEUED, queues: true, origin: startSickOrigin });
  const send = (key: string, body: string) =>
    call(q.mf, "/sms/a", {
      method: "POST",
      ip: "203.0.113.91",
      body,
      headers: { "content-type": "application/json", "idempotency-key": key },
    });
  const jobStatus = async (location: string) => {
    const r = await call(q.mf, location);
    return r.status === 200 ? (r.json() as { status?: string; expired?: boolean }) : undefined;
  };

  it("must not free a claim whose delivery started: the client's retry after the job expired runs again (two SMS)", async () => {
    const seen = (body: string) => q.origin.seen.filter((s) => s.body === body).length;
    expect((await send("spend", "{}")).headers.get("sluice-decision")).toBe("allow");
    const body = JSON.stringify({ to: "+15550133", text: "code 1234" });
    // the settle store fails for this delivery: its completion and its hold are lost, then its status write
    const isOp = (c: string[], op: string) =>
      ["eval", "evalsha"].includes((c[0] ?? "").toLowerCase()) && c[3 + Number(c[2])] === op;
    q.stack.bridge.dropNext({ match: (c) => isOp(c, "complete"), times: 50 });
    q.stack.bridge.dropNext({ match: (c) => isOp(c, "hold"), times: 50 });
    q.stack.bridge.dropNext({
      match: (c) => (c[0] ?? "").toLowerCase() === "set" && c.some((a) => a.includes('"status":"delivered"')),
      times: 50,
    });
    const queued = await send("r2-sms", body);
    expect(queued.status, queued.text).toBe(202);
    const location = queued.headers.get("location") as string;
    const final = await pollUntil(
      () => jobStatus(location),
      (s) => s?.status === "failed" || s?.status === "delivered",
      50_000,
    );
    expect(seen(body), "the job reached the origin once").toBe(1);
    expect(final).toMatchObject({ status: "failed", expired: true });
    // the SMS went out; the client retries its key
    const retry = await send("r2-sms", body);
    await pollUntil(
      async () => seen(body),
      (n) => n > 1,
      10_000,
    );
    expect(
      seen(body),
      `the retry must be refused (409), never sent again: it answered ${retry.status} ${retry.text.slice(0, 120)}`,
    ).toBe(1);
    expect(retry.status).toBe(409);
  }, 90_000);
});

/**
 * R3. `on_origin_error = "hold"` says a 5xx may have acted (the live path holds the key
 *     indeterminate, failover refuses to resend it), but the consumer retries a queued job after a
 *     5xx whatever the route says, and `park` clears `sent` (the next copy may `start` it, and a
 *     lapsed parked claim may even be taken over). Two deliveries of one key.
 */
const HOLDING: SluiceInput = {
  key_prefix: "rgh",
  timeout_ms: 5_000,
  routes: [
    {
      name: "pay",
      match: "/pay/*",
      methods: ["POST"],
      on_limit: "queue",
      queue: { retry_delays: ["1s"] },
      limits: [{ name: "provider", key: "global", rate: 1, period: "1s", burst: 1 }],
      idempotency: { required: true, on_origin_error: "hold" },
    },
  ],
};

describe("REVIEW R3: a queued job's 5xx under on_origin_error = hold", () => {
  const h = useStack({ sluice: HOLDING, queues: true, origin: startSickOrigin });
  const send = (path: string, key: string, body: string) =>
    call(h.mf, path, {
      method: "POST",
      ip: "203.0.113.92",
      body,
      headers: { "content-type": "application/json", "idempotency-key": key },
    });

  it("is not sent again: the route holds a 5xx as may-have-acted (the live path does)", async () => {
    const seen = (body: string) => h.origin.seen.filter((s) => s.body === body).length;
    expect((await send("/pay/ok", "spend", "{}")).headers.get("sluice-decision")).toBe("allow");
    const body = JSON.stringify({ charge: "r3" });
    const queued = await send("/pay/fail", "r3-pay", body);
    expect(queued.status, queued.text).toBe(202);
    const location = queued.headers.get("location") as string;
    await pollUntil(
      async () => {
        const r = await call(h.mf, location);
        return r.status === 200 ? (r.json().status as string) : undefined;
      },
      (s) => s === "failed" || s === "delivered",
      40_000,
    );
    expect(seen(body), "a 5xx the route holds as may-have-acted must not be sent again").toBe(1);
  }, 60_000);
});
