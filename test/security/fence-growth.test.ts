/**
 * Security regression: invented session ids filled Redis for 30 days. Every new `x-session-id`
 * left a fencing counter with a 30-day TTL (fifty requests, 53 keys), and so did every new
 * principal of an idempotency route whose principal is a header the client chooses. Fencing tokens
 * now come from one key per route (idempotency) and one per deployment (sessions); what a client's
 * invented values leave behind expires with their use, and tokens still rise strictly.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, type DemoOrigin, useStack } from "../integration/stack.js";

const HOUR_MS = 3_600_000;
const SLUICE: SluiceInput = {
  key_prefix: "fg",
  timeout_ms: 2_000,
  routes: [
    { name: "tools", match: "/tools", methods: ["POST"], session: { key: "header:x-session-id" } },
    {
      name: "pay",
      match: "/pay",
      methods: ["POST"],
      idempotency: { principal: "header:x-user", ttl: "1h" },
    },
  ],
};

const rig = useStack({ sluice: SLUICE });
let origin: DemoOrigin;
let mf: Miniflare;
beforeAll(() => {
  ({ origin, mf } = rig);
});

const post = (path: string, headers: Record<string, string>) =>
  call(mf, path, {
    method: "POST",
    ip: "203.0.113.66",
    body: "{}",
    headers: { "content-type": "application/json", ...headers },
  });

/** Every key of this file's deployment with its TTL in ms (-1: none). */
async function keysWithTtl(): Promise<Array<{ key: string; ttl: number }>> {
  const keys = await rig.redis.keys("fg:*");
  return Promise.all(keys.map(async (key) => ({ key, ttl: await rig.redis.pttl(key) })));
}

/** A key named after something a client sent: it carries a hash (32 hex digits) as a segment. */
const perClient = (key: string) => /(^|:)[0-9a-f]{32}(:|$)/.test(key);
const longLived = (ttl: number) => ttl === -1 || ttl > 3 * HOUR_MS;

/** The fencing tokens the origin saw for requests carrying `header` = one of `values`, in arrival order. */
const tokensSeen = (header: string, values: Set<string>) =>
  origin.seen
    .filter((s) => values.has(String(s.headers[header])))
    .map((s) => Number(s.headers["sluice-fencing-token"]));

function expectRising(tokens: number[]): void {
  expect(
    tokens.every((t) => Number.isSafeInteger(t) && t > 0),
    tokens.join(","),
  ).toBe(true);
  for (let i = 1; i < tokens.length; i++) expect(tokens[i], `token ${i}`).toBeGreaterThan(tokens[i - 1] as number);
}

describe("6. invented session ids and principals leave no long-lived keys", () => {
  it("50 invented session ids: one fencing key for all, locks gone with their calls, tokens strictly rising", async () => {
    const ids = Array.from({ length: 50 }, (_, i) => `invented-${i}-${crypto.randomUUID()}`);
    for (const id of ids) {
      const r = await post("/tools", { "x-session-id": id });
      expect(r.status, r.text).toBe(200);
    }
    // a session used again gets a higher token than any before it
    const again = await post("/tools", { "x-session-id": ids[0] as string });
    expect(again.status).toBe(200);
    const left = (await keysWithTtl()).filter((k) => k.key.startsWith("fg:session:"));
    // the one fencing key; a lock is deleted on release, and would live its lease plus a minute at most
    expect(left.filter((k) => k.ttl > 90_000).map((k) => k.key)).toEqual(["fg:session:fence"]);
    expect(left.length).toBeLessThanOrEqual(2);

    // rising under each session (the contract), and across them too (one key gives them all)
    const tokens = tokensSeen("x-session-id", new Set(ids));
    expect(tokens).toHaveLength(51);
    expect(tokens[50]).toBeGreaterThan(tokens[0] as number);
    expectRising(tokens);
    expect(Number(await rig.redis.get("fg:session:fence"))).toBe(tokens.at(-1));
  });

  it("50 client-chosen principals: one fencing key for the route, records only for their ttl, tokens strictly rising", async () => {
    const users = Array.from({ length: 50 }, (_, i) => `user-${i}-${crypto.randomUUID()}`);
    for (const user of users) {
      const r = await post("/pay", { "x-user": user, "idempotency-key": "same-key" });
      expect(r.status, r.text).toBe(200);
    }
    const left = (await keysWithTtl()).filter((k) => k.key.startsWith("fg:idem:"));
    // the route's one fencing key, and at most the records themselves (each for the route's ttl)
    expect(left.filter((k) => !/^fg:idem:pay:[0-9a-f]{32}$/.test(k.key)).map((k) => k.key)).toEqual([
      "fg:idem:pay:fence",
    ]);
    const records = left.filter((k) => k.key !== "fg:idem:pay:fence");
    expect(records).toHaveLength(50);
    for (const r of records) expect(r.ttl, r.key).toBeLessThanOrEqual(HOUR_MS);
    expectRising(tokensSeen("x-user", new Set(users)));
  });

  it("no key named after client input outlives its use: nothing per client lives longer than 3 hours", async () => {
    const all = await keysWithTtl();
    const lasting = all.filter((k) => longLived(k.ttl));
    expect(lasting.filter((k) => perClient(k.key))).toEqual([]);
    // what does last is a handful of fixed names, however many clients came
    expect(lasting.length, lasting.map((k) => k.key).join(", ")).toBeLessThanOrEqual(6);
  });
});
