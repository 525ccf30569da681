/**
 * Security regression: duplicates of an idempotent request escaped every limit. A replay gives back
 * what its decision charged (replays cost a client nothing against its limits), so with a limit of
 * 2 an hour, 30 duplicates of one key were all replayed: each a decision, a read of the stored
 * answer and a refund, at any rate the client liked. Replays are now bounded per principal and
 * route (`idempotency.replays`); past the bound a duplicate gets a 429 problem and keeps its charge.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, type DemoOrigin, useStack } from "../integration/stack.js";

const REPLAYS = 5; // per hour: the bound the route documents
const SLUICE: SluiceInput = {
  key_prefix: "rb",
  timeout_ms: 2_000,
  routes: [
    {
      name: "orders",
      match: "/orders",
      methods: ["POST"],
      limits: [{ name: "per-ip", key: "ip", rate: 2, period: "1h" }],
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
const BODY = JSON.stringify({ item: "book", qty: 1 });
const post = (ip: string, key: string) =>
  call(mf, "/orders?status=201", {
    method: "POST",
    ip,
    body: BODY,
    headers: { "content-type": "application/json", "idempotency-key": key },
  });
const show = (r: Answer) =>
  `${r.status} ${r.headers.get("sluice-decision")} replayed=${r.headers.get("idempotent-replayed")} ${r.text.slice(0, 200)}`;
const replayed = (r: Answer) => r.headers.get("idempotent-replayed") === "true";

/** The answer is stored after the response: waits until no record is in flight (in the test's Redis), asking nothing of sluice. */
async function untilCompleted(): Promise<void> {
  const states = async () => {
    const records = (await rig.redis.keys("rb:idem:orders:*")).filter((k) => /^rb:idem:orders:[0-9a-f]{32}$/.test(k));
    return Promise.all(records.map((k) => rig.redis.hget(k, "state")));
  };
  for (let i = 0; i < 100 && (await states()).some((s) => s !== "completed"); i++) await sleep(50);
  expect(await states()).not.toContain("inflight");
}

/** A duplicate, after the refund of the one before has landed (it goes after the response). */
async function duplicate(ip: string, key: string): Promise<Answer> {
  await sleep(150);
  return post(ip, key);
}

describe("5. duplicates of an idempotent request are bounded", () => {
  it("30 duplicates of one key: replays stop at the documented bound, the rest are 429 and reach nothing", async () => {
    const ip = "198.51.100.5";
    const first = await post(ip, "dup-1");
    expect(first.status, show(first)).toBe(201);
    await untilCompleted();

    const answers: Answer[] = [];
    for (let i = 0; i < 30; i++) answers.push(await duplicate(ip, "dup-1"));
    const replays = answers.filter(replayed);
    expect(replays.length, answers.map(show).join("\n")).toBe(REPLAYS);
    for (const r of replays) expect(r.text).toBe(first.text); // the stored answer, byte for byte
    // the bound is hit only after the replays it allows, and nothing is replayed past it
    const firstRefusal = answers.findIndex((r) => !replayed(r));
    expect(firstRefusal).toBe(REPLAYS);
    expect(answers.slice(firstRefusal).every((r) => r.status === 429 && !replayed(r))).toBe(true);

    const bounded = answers[firstRefusal] as Answer;
    expect(bounded.headers.get("content-type")).toContain("application/problem+json");
    expect(bounded.headers.get("sluice-decision")).toBe("reject");
    expect(bounded.json()).toMatchObject({ status: 429, title: "Too many replays" });
    const retryAfter = Number(bounded.headers.get("retry-after"));
    // one replay per 12 minutes refills the bucket: the next is due within that
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(720);
    expect(Number(bounded.json().retry_after_ms)).toBeGreaterThan(0);
    // refused without a refund: it spent the hour's last token, so the limit refuses the rest itself
    for (const r of answers.slice(firstRefusal + 1))
      expect(r.json(), show(r)).toMatchObject({ title: "Too many requests", limit: "per-ip" });

    expect(origin.seen.filter((s) => s.headers["idempotency-key"] === "dup-1")).toHaveLength(1);
  });

  it("replays within the bound still cost nothing against the client's limit", async () => {
    const ip = "198.51.100.6";
    expect((await post(ip, "free-1")).status).toBe(201); // 1 of 2 this hour
    await untilCompleted();
    for (let i = 0; i < REPLAYS; i++) {
      const r = await duplicate(ip, "free-1");
      expect(replayed(r), show(r)).toBe(true);
    }
    await sleep(300); // the last refund goes after the response
    const second = await post(ip, "free-2");
    expect(second.status, `the replays must have left the second request of the hour: ${show(second)}`).toBe(201);
    expect(replayed(second)).toBe(false);
    const third = await post(ip, "free-3");
    expect(third.status).toBe(429);
    expect(third.json()).toMatchObject({ title: "Too many requests", limit: "per-ip" });
  });

  it("the bound is per principal: another client's replays are untouched", async () => {
    const ip = "198.51.100.7";
    expect((await post(ip, "dup-1")).status).toBe(201); // the same key, another principal: another record
    await untilCompleted();
    const r = await duplicate(ip, "dup-1");
    expect(replayed(r), show(r)).toBe(true);
  });
});
