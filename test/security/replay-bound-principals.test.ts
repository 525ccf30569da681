/**
 * Security regression (issue 29, finding 9): the replay bound multiplied with invented principals.
 * Replays cost no tokens of the limits, so they have a bound of their own, `replays` per principal
 * and route; under `principal = "auto"` every `Authorization` value a client invents is a principal
 * with a bucket of its own: one IP under a 5-an-hour limit got 240 replays in 5 s (4 principals ×
 * 60). Replays are now paid from the client address's bucket too, in the same call: whatever
 * principals it claims, one address gets `replays` at most. Through the Worker in workerd.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, type DemoOrigin, useStack } from "../integration/stack.js";

const REPLAYS = 5; // per hour, per principal and now per address
const PRINCIPALS = 4;
const SLUICE: SluiceInput = {
  key_prefix: "rbp",
  timeout_ms: 5_000,
  routes: [
    {
      name: "orders",
      match: "/orders",
      methods: ["POST"],
      limits: [{ name: "per-ip", key: "ip", rate: 5, period: "1h" }],
      // principal "auto" (the default): the Authorization header's hash when there is no verified JWT
      idempotency: { replays: `${REPLAYS}/1h` },
    },
  ],
};

const rig = useStack({ sluice: SLUICE });
let origin: DemoOrigin;
let mf: Miniflare;
beforeAll(() => {
  ({ origin, mf } = rig);
});

type Answer = Awaited<ReturnType<typeof call>>;
const post = (ip: string, who: string, key: string) =>
  call(mf, "/orders?status=201", {
    method: "POST",
    ip,
    body: JSON.stringify({ item: "book" }),
    headers: { "content-type": "application/json", "idempotency-key": key, authorization: `Bearer ${who}` },
  });
const replayed = (r: Answer) => r.headers.get("idempotent-replayed") === "true";

/** Waits until every record of the route is completed (in the test's Redis), asking nothing of sluice. */
async function untilCompleted(): Promise<void> {
  const states = async () => {
    const records = (await rig.redis.keys("rbp:idem:orders:*")).filter((k) => /^rbp:idem:orders:[0-9a-f]{32}$/.test(k));
    return Promise.all(records.map((k) => rig.redis.hget(k, "state")));
  };
  for (let i = 0; i < 100 && (await states()).some((s) => s !== "completed"); i++) await sleep(50);
  expect(await states()).not.toContain("inflight");
}

describe("9. replays are bounded per client address, whatever principals it invents", () => {
  it(`${PRINCIPALS} invented Authorization values from one IP: ${REPLAYS} replays in all, not ${REPLAYS} each`, async () => {
    const ip = "198.51.100.9";
    const invented = Array.from({ length: PRINCIPALS }, (_, i) => `invented-${i}`);
    for (const who of invented) expect((await post(ip, who, "order-1")).status).toBe(201);
    await untilCompleted();

    // round robin over the principals, so that no one principal's own bucket runs out first
    const answers: Answer[] = [];
    for (let round = 0; round < REPLAYS + 1; round++)
      for (const who of invented) {
        answers.push(await post(ip, who, "order-1"));
        await sleep(100); // a replay's refund lands after its response
      }
    const replays = answers.filter(replayed);
    expect(replays.length, answers.map((r) => `${r.status} ${r.text.slice(0, 80)}`).join("\n")).toBe(REPLAYS);
    const firstRefusal = answers.findIndex((r) => !replayed(r));
    expect(firstRefusal).toBe(REPLAYS);
    expect(answers[firstRefusal]?.json()).toMatchObject({ status: 429, title: "Too many replays" });
    expect(answers.slice(firstRefusal).every((r) => r.status === 429)).toBe(true);
    // every first arrival reached the origin once; no replay did
    expect(origin.seen.filter((s) => s.headers["x-forwarded-for"] === ip)).toHaveLength(PRINCIPALS);
  });

  it("another address's replays are its own: the bound is per address, not the route's", async () => {
    const ip = "198.51.100.10";
    expect((await post(ip, "someone", "order-2")).status).toBe(201);
    await untilCompleted();
    const r = await post(ip, "someone", "order-2");
    expect(replayed(r), `${r.status} ${r.text}`).toBe(true);
  });
});
