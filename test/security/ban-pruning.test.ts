/**
 * Finding 7 of issue 29: ban entries were never pruned. Invented API keys banned for 1 s each left
 * a field in the lists hash for 30 days (the hash's TTL, renewed by every ban), which every isolate
 * re-read whole on every change and scanned on every request; and nothing bounded how many bans
 * could be in force. Now every read and write of the hash (lua/access-lists.lua) drops what has run out
 * first, in the same atomic call, and at most `MAX_BANS` automatic bans are in force: past it a new
 * ban drops the ban that expires soonest, never an operator's entry.
 */
import { afterAll, describe, expect, it } from "vitest";
import { RespClient } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack } from "../integration/stack.js";

/** The cap on automatic bans in force (`MAX_BANS`, src/features/access/lists-store.ts), as docs/operating.md says it. */
const MAX_BANS = 1_000;
const ADMIN = "ban-pruning-admin-token-0123456789";
const PREFIX = "bp";
const LISTS = `${PREFIX}:lists`;
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  timeout_ms: 1_000,
  routes: [
    {
      name: "short",
      match: "/short/*",
      limits: [
        {
          name: "per-key",
          key: "header:x-api-key",
          rate: 1,
          period: "1h",
          ban: { after: 1, within: "1m", for: ["1s"] },
        },
      ],
    },
    {
      name: "long",
      match: "/long/*",
      limits: [
        {
          name: "per-key",
          key: "header:x-api-key",
          rate: 1,
          period: "1h",
          ban: { after: 1, within: "1m", for: ["10m"] },
        },
      ],
    },
  ],
};

const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
let resp: RespClient | undefined;
const redis = () => (resp ??= RespClient.fromUrl(rig.stack.redis.url));
afterAll(() => resp?.close());

const hlen = async () => Number(await redis().send(["HLEN", LISTS]));
async function values(): Promise<Array<{ entry: string; until: number; source?: string }>> {
  const flat = ((await redis().send(["HGETALL", LISTS])) ?? []) as Buffer[];
  return flat.filter((_, i) => i % 2 === 1).map((v) => JSON.parse(String(v)) as { entry: string; until: number });
}

/** Polls (at most ~10 s) until `read` gives what `done` wants; the last reading. */
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
  let v = await read();
  for (let i = 0; i < 200 && !done(v); i++) {
    await sleep(50);
    v = await read();
  }
  return v;
}

/** Each key: its one request of the hour, then the refusal that bans it (written after the response). */
async function banKeys(route: string, keys: readonly string[]): Promise<void> {
  for (const key of keys) {
    expect((await call(rig.mf, `/${route}/x`, { headers: { "x-api-key": key } })).status).toBe(200);
    expect((await call(rig.mf, `/${route}/x`, { headers: { "x-api-key": key } })).status).toBe(429);
  }
}

const listed = async () =>
  (await call(rig.mf, "/__sluice/lists", { headers: { authorization: `Bearer ${ADMIN}` } })).json().entries as Array<{
    entry: string;
  }>;

describe("bans that ran out leave nothing behind", () => {
  const keys = Array.from({ length: 40 }, (_, i) => `invented-${i}`);

  it("a read of the lists drops every ban that ran out, atomically", async () => {
    await banKeys("short", keys);
    // (on a slow machine the first bans may have run out, and been pruned by a later write, by now)
    await until(values, (v) => v.some((e) => e.entry === `header:x-api-key=${keys[keys.length - 1]}`));
    const last = Math.max(...(await values()).map((v) => v.until));
    await sleep(Math.max(0, last - Date.now()) + 50);
    // the operator's read is the lists' read (the isolates' refresh is the same call): nothing dead comes back,
    // and nothing dead stays
    expect(await listed()).toEqual([]);
    expect(await hlen()).toBe(0);
  });

  it("a write drops them too: the hash holds only what is in force", async () => {
    const more = keys.map((k) => `${k}-again`);
    await banKeys("short", more);
    await until(values, (v) => v.some((e) => e.entry === `header:x-api-key=${more[more.length - 1]}`));
    const last = Math.max(...(await values()).map((v) => v.until));
    await sleep(Math.max(0, last - Date.now()) + 50);
    await banKeys("long", ["fresh-ban"]);
    const left = await until(values, (v) => v.some((e) => e.entry === "header:x-api-key=fresh-ban"));
    expect(left.map((v) => v.entry)).toEqual(["header:x-api-key=fresh-ban"]);
  });
});

describe("bans in force are bounded", () => {
  it(`past ${MAX_BANS} automatic bans, a new ban drops the one that expires soonest, never an operator's entry`, async () => {
    await redis().send(["DEL", LISTS]);
    const now = Date.now();
    const seeded = Array.from({ length: MAX_BANS }, (_, i) => {
      const entry = `header:x-api-key=seed-${i}`;
      const until = now + 300_000 + i * 10; // 5 minutes, seed-0 the soonest
      return [`deny:${entry}`, JSON.stringify({ kind: "deny", entry, until, note: "seeded", source: "ban" })];
    });
    // the operator's entries expire sooner than any ban: still never dropped, nor counted
    const operator = ["203.0.113.200", "header:x-api-key=by-hand"].map((entry) => [
      `deny:${entry}`,
      JSON.stringify({ kind: "deny", entry, until: now + 120_000 }),
    ]);
    await redis().send(["HSET", LISTS, ...[...seeded, ...operator].flat()]);
    await redis().send(["INCR", `${PREFIX}:version`]);

    await banKeys("long", ["cap-1", "cap-2", "cap-3"]);
    const after = await until(values, (v) => v.some((e) => e.entry === "header:x-api-key=cap-3"));
    const bans = after.filter((v) => v.source === "ban").map((v) => v.entry);
    expect(bans).toHaveLength(MAX_BANS);
    for (const i of [0, 1, 2]) expect(bans).not.toContain(`header:x-api-key=seed-${i}`);
    expect(bans).toContain("header:x-api-key=seed-3");
    for (const k of ["cap-1", "cap-2", "cap-3"]) expect(bans).toContain(`header:x-api-key=${k}`);
    const kept = after.filter((v) => v.source === undefined).map((v) => v.entry);
    expect(kept.sort()).toEqual(["203.0.113.200", "header:x-api-key=by-hand"]);
    expect(await hlen()).toBe(MAX_BANS + 2);
  });
});
