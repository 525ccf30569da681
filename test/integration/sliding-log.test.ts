import type { Miniflare } from "miniflare";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/index.js";
import type { SluiceInput } from "../../src/config/schema.js";
import { keyedBuckets } from "../../src/features/rate-limit/decision/buckets.js";
import { call, sleep, useStack } from "./stack.js";

/*
 * The sliding log end to end: three Worker instances (three isolates) against one Redis. Every
 * request admitted leaves its own member in the bucket's sorted set, a weighted one carrying its
 * cost (one member whatever the cost), and a replay's refund takes back exactly its own.
 */

const KEY = "header:x-api-key";
const SLUICE: SluiceInput = {
  // a decision under a loaded machine is still Redis's (not a degraded, local one)
  timeout_ms: 5_000,
  routes: [
    {
      name: "quota",
      match: "/quota/*",
      limits: [{ name: "provider", key: KEY, algorithm: "sliding_log", rate: 5, period: "1h" }],
    },
    {
      name: "units",
      match: "/units",
      limits: [
        {
          name: "tokens",
          key: KEY,
          algorithm: "sliding_log",
          rate: 6,
          period: "1h",
          cost: "header:x-cost",
          max_cost: 6,
        },
      ],
    },
    {
      name: "orders",
      match: "/orders",
      idempotency: {},
      limits: [{ name: "per-key", key: KEY, algorithm: "sliding_log", rate: 3, period: "1h" }],
    },
  ],
};

const rig = useStack({ sluice: SLUICE, instances: 3 });
const worker = (i: number) => rig.workers[i % 3] as Miniflare;

/** The Redis key of a limit's bucket for an API key, as the Worker computes it (the home region). */
async function bucketKeyOf(route: string, path: string, apiKey: string): Promise<string> {
  const loaded = loadConfig({ ORIGIN_URL: "https://o.example", SLUICE });
  if (!loaded.ok) throw loaded.error;
  const r = loaded.config.routes.find((x) => x.name === route);
  if (!r) throw new Error(route);
  const url = new URL(`http://sluice.test${path}`);
  const facts = { ip: "203.0.113.1", matchPath: url.pathname, headers: new Headers({ "x-api-key": apiKey }), url };
  const [b] = await keyedBuckets(r, facts, loaded.config, "home");
  if (!b) throw new Error(route);
  return b.key;
}

/** The log's request members, "{entry}*{cost}", oldest first (the running sum beside them left out). */
const membersOf = async (key: string) => ((await rig.redis.zrange(key, 0, -1)) as string[]).filter((m) => m !== "#sum");
/** Members by the request that added them: entry id → its cost. */
const byEntry = (members: string[]) => {
  const costs = new Map<string, number>();
  for (const m of members) costs.set(m.slice(0, m.lastIndexOf("*")), Number(m.slice(m.lastIndexOf("*") + 1)));
  return costs;
};

describe("sliding_log through the Worker", () => {
  it("12 concurrent requests of one key across three isolates, rate 5: exactly 5 pass, one entry each", async () => {
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => call(worker(i), "/quota/send", { headers: { "x-api-key": "sms-1" } })),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(5);
    expect(statuses.filter((s) => s === 429)).toHaveLength(7);
    const refused = results.find((r) => r.status === 429);
    expect(refused?.json()).toMatchObject({ limit: "provider" });
    // the first entry leaves the period an hour after it was admitted
    const retry = Number(refused?.headers.get("retry-after"));
    expect(retry).toBeGreaterThan(3_500);
    expect(retry).toBeLessThanOrEqual(3_600);
    const members = await membersOf(await bucketKeyOf("quota", "/quota/send", "sms-1"));
    expect(members).toHaveLength(5);
    for (const m of members) expect(m).toMatch(/^[A-Za-z0-9_-]{16}\*1$/);
    expect(byEntry(members).size).toBe(5);
  });

  it("a request costing 4 adds one member carrying 4; one costing 3 more is refused and adds none", async () => {
    const send = (cost: number) =>
      call(worker(cost), "/units", { headers: { "x-api-key": "llm-1", "x-cost": String(cost) } });
    expect((await send(4)).status).toBe(200);
    const refused = await send(3);
    expect(refused.status).toBe(429);
    expect((await send(2)).status).toBe(200);
    const members = await membersOf(await bucketKeyOf("units", "/units", "llm-1"));
    expect(members).toHaveLength(2);
    expect([...byEntry(members).values()].sort()).toEqual([2, 4]);
  });

  it("a replay gives back its charge: its own entry leaves the log, the first request's stays", async () => {
    const key = await bucketKeyOf("orders", "/orders", "shop-1");
    const post = (idem: string) =>
      call(worker(0), "/orders", {
        method: "POST",
        body: "{}",
        headers: { "content-type": "application/json", "idempotency-key": idem, "x-api-key": "shop-1" },
      });
    expect((await post("o-1")).status).toBe(200);
    const first = await membersOf(key);
    expect(first).toHaveLength(1);
    // the answer is stored after the response: ask until the replay comes back
    let replayed = false;
    for (let i = 0; i < 40 && !replayed; i++) {
      replayed = (await post("o-1")).headers.get("idempotent-replayed") === "true";
      if (!replayed) await sleep(50);
    }
    expect(replayed).toBe(true);
    // the refund goes after the response: wait until every replay's charge has been given back
    let members: string[] = [];
    for (let i = 0; i < 40; i++) {
      members = await membersOf(key);
      if (members.length === 1) break;
      await sleep(50);
    }
    expect(members).toEqual(first);
    // two more pass (rate 3), the fourth is refused
    expect((await post("o-2")).status).toBe(200);
    expect((await post("o-3")).status).toBe(200);
    expect((await post("o-4")).status).toBe(429);
  });
});
