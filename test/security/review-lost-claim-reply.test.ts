/**
 * REVIEW (h-review, adversarial read of issue 29's fixes). FAILS on main at e95bf24.
 *
 * R6 (availability). A claim that ran in Redis but whose reply was lost (a reset, or the decision
 * budget running out while Redis was slow) is answered 503 and nothing was forwarded; its owner
 * never renews nor releases it. Since a lapsed lease now means indeterminate, the client's retry
 * after the lease is refused "Outcome indeterminate" for the key's whole `ttl` (24 h by default)
 * until an operator resolves it, though the origin never saw the request. Suggested: on a claim
 * that failed with a StoreError, release it by its owner (settle store, in waitUntil): landed, it
 * was ours and unsent; not landed, `not_owner`.
 */
import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, useStack } from "../integration/stack.js";
import { idempotencyRecords, isScriptOp, pollUntil, untilRedisPast } from "../support/guard-records.js";

const PREFIX = "rlc";
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  timeout_ms: 5_000,
  routes: [{ name: "orders", match: "/orders", methods: ["POST"], idempotency: { lease: "1s" } }],
};
const rig = useStack({ sluice: SLUICE });

describe("REVIEW R6: a claim whose reply was lost", () => {
  it("does not lock the key for its ttl: the retry after the lease runs (the origin never saw it)", async () => {
    const body = '{"order":"r6"}';
    const post = () =>
      call(rig.mf, "/orders", {
        method: "POST",
        ip: "203.0.113.95",
        body,
        headers: { "content-type": "application/json", "idempotency-key": "r6" },
      });
    rig.stack.bridge.dropNext({ match: (c) => isScriptOp(c, "claim"), when: "after" });
    const first = await post();
    expect(first.status, first.text).toBe(503);
    const records = await pollUntil(
      () => idempotencyRecords(rig.redis, PREFIX, "orders"),
      (r) => r.length === 1,
      5_000,
    );
    expect(records[0]?.fields.state, "the claim ran in Redis").toBe("inflight");
    await untilRedisPast(rig.redis, Number(records[0]?.fields.lease_until) + 500);
    const retry = await post();
    expect(rig.origin.seen.filter((s) => s.body === body).length, "the origin never saw the first").toBe(
      retry.status === 200 ? 1 : 0,
    );
    expect(retry.status, `the retry of a request that never reached the origin: ${retry.text.slice(0, 160)}`).toBe(200);
  }, 30_000);
});
