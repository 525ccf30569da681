/**
 * Issue 29, finding 4: a completion lost on its way to Redis became a duplicate. The one
 * `complete` call failed (a connection reset), the known outcome was logged and dropped, renewal
 * stopped, the lease ran out and the next duplicate took the key over: two orders. Now the
 * completion is tried again (the claim renewed meanwhile), and a claim whose lease lapses while in
 * flight (its holder gone, or cut off from Redis) is indeterminate, never free: a key ends
 * answered or indeterminate, never free after the origin acted.
 *
 * The review of those fixes found two more ways through the same door. A holder cut off from
 * Redis kept its call running (up to origin_timeout and 25 s of late answer) while its record
 * expired `lease + ttl` after the last renewal that landed, or `ttl` after a duplicate lapsed it:
 * the next duplicate was forwarded beside the first call. Now the claim tells the record its
 * call's longest life, and the record is kept that long plus `ttl`, in flight or lapsed. And a
 * claim whose reply was lost (it ran in Redis, the client got a 503, nothing was sent) locked its
 * key indeterminate for the whole `ttl`: now it is given back by its owner.
 */
import type { Miniflare } from "miniflare";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { startBridge, type Bridge } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, TOKEN, useStack } from "../integration/stack.js";
import { startSickOrigin, type SickOrigin } from "../support/sick-origin.js";
import {
  idempotencyRecords,
  isScriptOp,
  ledgerEntries,
  pollUntil,
  redisNowMs,
  untilRedisPast,
} from "../support/guard-records.js";

const PREFIX = "lc";
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  // about guards, not latency: a loaded machine must not turn claims into 503s
  timeout_ms: 5_000,
  routes: [
    { name: "orders", match: "/orders/*", methods: ["POST"], idempotency: { lease: "1s" } },
    // valid at load: ttl >= origin_timeout, lease < ttl; the call may run origin_timeout + 25 s of late answer
    {
      name: "short",
      match: "/short/*",
      methods: ["POST"],
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

type Answer = Awaited<ReturnType<typeof call>>;
const post = (w: Miniflare, path: string, key: string) =>
  call(w, path, {
    method: "POST",
    ip: "203.0.113.80",
    body: JSON.stringify({ order: key }),
    headers: { "content-type": "application/json", "idempotency-key": key },
  });
const show = (r: Answer) =>
  `${r.status} ${r.headers.get("sluice-decision")} replayed=${r.headers.get("idempotent-replayed")} ${r.text.slice(0, 200)}`;
const orders = (key: string) => origin.seen.filter((s) => s.headers["idempotency-key"] === key).length;
/** The key's record: the route's latest claim (the highest fencing token). */
const recordOf = async (route = "orders") =>
  (await idempotencyRecords(rig.redis, PREFIX, route)).sort(
    (a, b) => Number(b.fields.fence) - Number(a.fields.fence),
  )[0];
const SHORT_TTL_MS = 3_000;
/** Until the claim is settled, or its lease (1 s, no longer renewed) is well past: what a duplicate then meets. */
async function untilSettledOrLapsed(): Promise<void> {
  const r = await pollUntil(
    () => recordOf(),
    (rec) => rec?.fields.state !== "inflight",
    3_000,
  );
  if (r?.fields.state === "inflight") await untilRedisPast(rig.redis, Number(r.fields.lease_until) + 1_500);
}

describe("finding 4: a known outcome is never lost", () => {
  it("a completion reset on its way to Redis is written again: the duplicate after the lease replays it, one order", async () => {
    origin.release();
    rig.stack.bridge.dropNext({ match: (c) => isScriptOp(c, "complete") });
    const first = await post(mf, "/orders/a", "lost-1");
    expect(first.status, show(first)).toBe(200);
    await untilSettledOrLapsed();
    const dup = await post(mf, "/orders/a", "lost-1");
    expect(dup.headers.get("idempotent-replayed"), `the duplicate must replay the first order: ${show(dup)}`).toBe(
      "true",
    );
    expect(dup.text).toBe(first.text);
    expect(orders("lost-1")).toBe(1);
  }, 60_000);

  it("a completion whose reply was lost (it landed) is not counted stale when written again", async () => {
    origin.release();
    rig.stack.bridge.dropNext({ match: (c) => isScriptOp(c, "complete"), when: "after" });
    expect((await post(mf, "/orders/a", "lost-2")).status).toBe(200);
    await untilSettledOrLapsed();
    expect((await recordOf())?.fields.state).toBe("completed");
    const entries = (await ledgerEntries(rig.redis, PREFIX)).map((e) => e.event);
    expect(entries).toContain("complete");
    const events = entries.filter((e) => e?.startsWith("stale_"));
    expect(events).toEqual([]);
  }, 60_000);

  describe("a holder cut off from Redis", () => {
    let cutOff: Bridge;
    let holder: Miniflare;
    beforeAll(async () => {
      // the holder's isolate reaches Redis through a bridge of its own, which the test can cut
      cutOff = await startBridge({ redisUrl: rig.stack.redis.url, token: TOKEN });
      holder = rig.worker({ sluice: SLUICE, redisRestUrl: cutOff.url });
      return () => cutOff.close();
    });
    // a test that fails midway leaves the holder cut off and its call held: the next starts afresh
    afterEach(() => {
      cutOff.setMode("normal");
      origin.release();
    });

    it("its lease lapses into indeterminate, never a takeover: the duplicate is refused, and is answered once the holder's completion lands", async () => {
      origin.hold();
      const first = post(holder, "/orders/hold", "cut-1");
      await pollUntil(
        async () => orders("cut-1"),
        (n) => n === 1,
      );
      cutOff.setMode("refuse");
      origin.release();
      expect((await first).status).toBe(200);
      await untilSettledOrLapsed();
      const dup = await post(mf, "/orders/hold", "cut-1");
      expect(dup.status, `the origin acted: the duplicate must not run (${show(dup)})`).toBe(409);
      expect(dup.json()).toMatchObject({ title: "Outcome indeterminate" });
      expect(orders("cut-1")).toBe(1);

      // Redis is back for the holder: its completion lands if it is still trying, else the key stays indeterminate
      cutOff.setMode("normal");
      const settled = await pollUntil(
        () => recordOf(),
        (r) => r?.fields.state === "completed",
        10_000,
      );
      const again = await post(mf, "/orders/hold", "cut-1");
      if (settled?.fields.state === "completed")
        expect(again.headers.get("idempotent-replayed"), show(again)).toBe("true");
      else expect(again.status, show(again)).toBe(409);
      expect(orders("cut-1")).toBe(1);
    }, 60_000);

    /**
     * The holder's isolate reaches Redis again (after a test cut it off, its store may skip Redis
     * for a while after the failures it saw): a request of its own gets through.
     */
    async function untilHolderReachesRedis(): Promise<void> {
      let n = 0;
      const warm = await pollUntil(
        () => post(holder, "/orders/warm", `warm-${++n}-${Date.now()}`),
        (r) => r.status === 200,
        20_000,
      );
      expect(warm.status, show(warm)).toBe(200);
    }

    /** Sends the holder's call, cuts the holder off once the call is at the origin; gives the claim's record as its last renewal left it. */
    async function cutOffMidCall(key: string) {
      await untilHolderReachesRedis();
      origin.hold();
      const first = post(holder, "/short/hold", key);
      const reached = await pollUntil(
        async () => orders(key),
        (n) => n === 1,
      );
      expect(reached, "the holder's call reached the origin").toBe(1);
      cutOff.setMode("refuse");
      // a renewal already on its way may still land: wait until the record stops moving
      let rec = await recordOf("short");
      for (let i = 0; i < 20; i++) {
        await untilRedisPast(rig.redis, (await redisNowMs(rig.redis)) + 700);
        const now = await recordOf("short");
        if (now?.fields.lease_until === rec?.fields.lease_until) break;
        rec = now;
      }
      return { first, rec };
    }

    it("its record outlives lease + ttl while its call may still run: the duplicate then is refused, never forwarded", async () => {
      const { first, rec } = await cutOffMidCall("r1-cut");
      expect(rec?.fields.state).toBe("inflight");
      // where Redis dropped the record before: lease + ttl after the last renewal that landed
      await untilRedisPast(rig.redis, Number(rec?.fields.lease_until) + SHORT_TTL_MS + 500);
      expect(origin.holding, "the first call is still at the origin").toBe(1);
      const kept = await recordOf("short");
      expect(kept?.fields.fence, "the in-flight record is kept while its call may run").toBe(rec?.fields.fence);
      expect(Number(kept?.fields.life_until)).toBeGreaterThan(Number(rec?.fields.lease_until) + SHORT_TTL_MS);
      // a duplicate through a healthy isolate: it must be refused (409), never forwarded
      const dup = post(mf, "/short/hold", "r1-cut");
      const seenDup = await pollUntil(
        async () => orders("r1-cut"),
        (n) => n > 1,
        5_000,
      );
      origin.release();
      const [, d] = await Promise.all([first, dup]);
      cutOff.setMode("normal");
      expect(seenDup, `the origin got the key twice while the first call ran (duplicate answered ${d.status})`).toBe(1);
      expect(d.status, show(d)).toBe(409);
      expect(d.json()).toMatchObject({ title: "Outcome indeterminate" });
    }, 60_000);

    it("nor once lapsed: the lapse keeps it past the call's life, not `ttl` from the lapse; the holder's answer lands when it is back", async () => {
      const { first } = await cutOffMidCall("r1-lapse");
      // the lease (1 s) runs out unrenewed: the duplicate finds it lapsed and is refused, as it must be
      const lapsed = await pollUntil(
        () => post(mf, "/short/hold", "r1-lapse"),
        (r) => r.status === 409 && String(r.json().title) === "Outcome indeterminate",
        20_000,
      );
      expect(lapsed.status, show(lapsed)).toBe(409);
      expect(lapsed.json()).toMatchObject({ title: "Outcome indeterminate" });
      const lapsedAt = await redisNowMs(rig.redis);
      // where Redis dropped the lapsed record before: `ttl` (3 s) after the lapse
      await untilRedisPast(rig.redis, lapsedAt + SHORT_TTL_MS + 500);
      expect(origin.holding, "the first call is still at the origin").toBe(1);
      expect((await recordOf("short"))?.fields.state, "the lapsed record is kept while its call may run").toBe(
        "indeterminate",
      );
      const third = post(mf, "/short/hold", "r1-lapse");
      const n = await pollUntil(
        async () => orders("r1-lapse"),
        (k) => k > 1,
        5_000,
      );
      const t = await third;
      expect(n, `the origin got the key twice while the first call ran (third answered ${t.status})`).toBe(1);
      expect(t.status, show(t)).toBe(409);

      // the holder reaches Redis again and its late answer comes: stored over the lapse, then replayed
      cutOff.setMode("normal");
      origin.release();
      await first;
      const done = await pollUntil(
        () => recordOf("short"),
        (r) => r?.fields.state === "completed",
        20_000,
      );
      expect(done?.fields.state, "the holder's late answer settles the lapsed key").toBe("completed");
      const replay = await post(mf, "/short/hold", "r1-lapse");
      expect(replay.headers.get("idempotent-replayed"), show(replay)).toBe("true");
      expect(orders("r1-lapse")).toBe(1);
    }, 90_000);
  });
});

describe("a claim whose reply was lost", () => {
  it("is given back by its owner: the retry runs (the origin never saw the first), not refused indeterminate for the ttl", async () => {
    const body = '{"order":"r6"}';
    const send = () =>
      call(mf, "/orders/a", {
        method: "POST",
        ip: "203.0.113.95",
        body,
        headers: { "content-type": "application/json", "idempotency-key": "r6" },
      });
    const since = await redisNowMs(rig.redis);
    rig.stack.bridge.dropNext({ match: (c) => isScriptOp(c, "claim"), when: "after" });
    const first = await send();
    expect(first.status, first.text).toBe(503);
    // the claim ran in Redis (its reply was lost), and its owner gave it back after the response
    const events = await pollUntil(
      async () =>
        (await ledgerEntries(rig.redis, PREFIX))
          .filter((e) => Number(e.at) >= since && e.route === "orders")
          .map((e) => e.event),
      (ev) => ev.includes("release"),
      10_000,
    );
    expect(events, "the claim ran in Redis").toContain("claim");
    expect(events, "and was released by its owner").toContain("release");
    expect(orders("r6"), "the origin never saw the first").toBe(0);
    const retry = await send();
    expect(retry.status, `the retry of a request that never reached the origin: ${show(retry)}`).toBe(200);
    expect(rig.origin.seen.filter((s) => s.body === body).length).toBe(1);
  }, 30_000);
});
