/**
 * Issue 29, finding 4: a completion lost on its way to Redis became a duplicate. The one
 * `complete` call failed (a connection reset), the known outcome was logged and dropped, renewal
 * stopped, the lease ran out and the next duplicate took the key over: two orders. Now the
 * completion is tried again (the claim renewed meanwhile), and a claim whose lease lapses while in
 * flight (its holder gone, or cut off from Redis) is indeterminate, never free: a key ends
 * answered or indeterminate, never free after the origin acted.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import { startBridge, type Bridge } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, TOKEN, useStack } from "../integration/stack.js";
import { startSickOrigin, type SickOrigin } from "../support/sick-origin.js";
import { idempotencyRecords, isScriptOp, ledgerEntries, pollUntil, untilRedisPast } from "../support/guard-records.js";

const PREFIX = "lc";
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  // about guards, not latency: a loaded machine must not turn claims into 503s
  timeout_ms: 5_000,
  routes: [{ name: "orders", match: "/orders/*", methods: ["POST"], idempotency: { lease: "1s" } }],
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
const recordOf = async () =>
  (await idempotencyRecords(rig.redis, PREFIX, "orders")).sort(
    (a, b) => Number(b.fields.fence) - Number(a.fields.fence),
  )[0];
/** Until the claim is settled, or its lease (1 s, no longer renewed) is well past: what a duplicate then meets. */
async function untilSettledOrLapsed(): Promise<void> {
  const r = await pollUntil(recordOf, (rec) => rec?.fields.state !== "inflight", 3_000);
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
      const settled = await pollUntil(recordOf, (r) => r?.fields.state === "completed", 10_000);
      const again = await post(mf, "/orders/hold", "cut-1");
      if (settled?.fields.state === "completed")
        expect(again.headers.get("idempotent-replayed"), show(again)).toBe("true");
      else expect(again.status, show(again)).toBe(409);
      expect(orders("cut-1")).toBe(1);
    }, 60_000);
  });
});
