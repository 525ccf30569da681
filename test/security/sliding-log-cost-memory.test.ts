/**
 * Security regression (issue 29, finding 6): a sliding log wrote one sorted-set member per cost
 * unit. With `cost = "header:x-cost"` and a large `max_cost`, each request of cost 10,000 added
 * 10,000 members (1.36 MB), kept for the period: some 800 such requests filled a 1 GB database,
 * and then every route fell to `on_store_error`. A request is now one member carrying its cost,
 * counted by a running sum kept beside the members: the key's size follows the requests, not
 * their costs. Through the Worker in workerd, the key read in the test's own Redis.
 */
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RespClient } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, useStack } from "../integration/stack.js";

const RATE = 10_000;
const SLUICE: SluiceInput = {
  key_prefix: "slm",
  timeout_ms: 5_000,
  routes: [
    {
      name: "tokens",
      match: "/llm/*",
      limits: [
        {
          name: "per-key",
          key: "header:x-api-key",
          algorithm: "sliding_log",
          rate: RATE,
          period: "1h",
          cost: "header:x-cost",
          max_cost: RATE,
        },
      ],
    },
  ],
};

const rig = useStack({ sluice: SLUICE });
let mf: Miniflare;
let resp: RespClient;
beforeAll(() => {
  mf = rig.mf;
  resp = RespClient.fromUrl(rig.stack.redis.url);
});
afterAll(() => resp?.close());

const send = (apiKey: string, cost: number) =>
  call(mf, "/llm/complete", { method: "POST", body: "{}", headers: { "x-api-key": apiKey, "x-cost": String(cost) } });

/** The one sliding log this file's deployment holds for each API key: its key names, read in the test's Redis. */
async function logs(): Promise<string[]> {
  const keys = (await resp.send(["KEYS", "slm:tokens:per-key:*"])) as Buffer[];
  return keys.map(String);
}
const card = async (key: string) => Number(await resp.send(["ZCARD", key]));
const bytes = async (key: string) => Number(await resp.send(["MEMORY", "USAGE", key, "SAMPLES", "0"]));

describe("6. a sliding log's memory is bounded by its requests, not their costs", () => {
  it("20 requests of cost 500 (the whole 10,000 of the hour) leave 20 members and a few KB, and the 21st is refused", async () => {
    const N = 20;
    for (let i = 0; i < N; i++) {
      const r = await send("big-spender", RATE / N);
      expect(r.status, r.text).toBe(200);
    }
    const refused = await send("big-spender", 1);
    expect(refused.status).toBe(429);
    expect(refused.json()).toMatchObject({ limit: "per-key" });
    const [key] = await logs();
    expect(key).toBeDefined();
    // one member per request (and the running sum beside them), not one per unit: 10,000 before
    expect(await card(key as string)).toBeLessThanOrEqual(N + 1);
    // about 1.3 MB before (130 B a unit); a few hundred bytes now
    expect(await bytes(key as string)).toBeLessThan(8 * 1024);
  });

  it("one request of the largest cost is one member: 20 such clients add kilobytes, not the 27 MB they took", async () => {
    const clients = 20;
    const used = async () => Number(String(await resp.send(["INFO", "memory"])).match(/used_memory:(\d+)/)?.[1]);
    const before = await used();
    const answers = await Promise.all(Array.from({ length: clients }, (_, i) => send(`client-${i}`, RATE)));
    for (const r of answers) expect(r.status, r.text).toBe(200);
    const keys = await logs();
    expect(keys).toHaveLength(clients + 1); // and the first test's
    for (const key of keys) expect(await card(key)).toBeLessThanOrEqual(21);
    // 20 × 1.36 MB before; each log a few hundred bytes now (plus what the decisions themselves leave)
    expect((await used()) - before).toBeLessThan(1024 * 1024);
  });
});
