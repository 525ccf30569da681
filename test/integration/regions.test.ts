import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RespClient } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { hashIdentifier } from "../../src/identity/hash.js";
import { bucketKey } from "../../src/store/layout.js";
import { call, startWorker, TOKEN, type DemoOrigin, type RedisStack, sleep, useStack } from "./stack.js";

const regions = { us: { continents: ["NA"] }, eu: { continents: ["EU"], colos: ["DME"] }, ap: { continents: ["AS"] } };
const SLUICE: SluiceInput = {
  key_prefix: "g",
  home_region: "us",
  // long enough that request nudges stay out of the way of the cron-driven tests below
  rebalance_every: "3s",
  regions,
  routes: [
    { name: "regional", match: "/regional", limits: [{ name: "per-ip", rate: 1, period: "1h", burst: 2 }] },
    {
      name: "world",
      match: "/world",
      limits: [{ name: "all", key: "global", rate: 1, period: "1h", burst: 3, scope: "global" }],
    },
    {
      name: "mixed",
      match: "/mixed",
      limits: [
        { name: "per-ip", rate: 1, period: "1h", burst: 10 },
        { name: "site", key: "global", rate: 1, period: "1h", burst: 2, scope: "global" },
      ],
    },
    {
      name: "home-mixed",
      match: "/home-mixed",
      limits: [
        { name: "per-ip", rate: 1, period: "1h", burst: 10 },
        { name: "site", key: "global", rate: 1, period: "1h", burst: 10, scope: "global" },
      ],
    },
    {
      name: "provider",
      match: "/provider",
      limits: [{ name: "sms", key: "global", rate: 90, period: "1h", scope: "split" }],
    },
  ],
};
const EU = { continent: "EU", colo: "FRA" };
const US = { continent: "NA", colo: "IAD" };
const AP = { continent: "AS", colo: "NRT" };

// the EU region's own Redis; the home one comes with the origin
const euRig = useStack({ origin: false });
const rig = useStack();
let home: RedisStack;
let eu: RedisStack;
let origin: DemoOrigin;
let mf: Miniflare;
let homeResp: RespClient;
let euResp: RespClient;

const bindingsFor = (euUrl: string) => ({ UPSTASH_REDIS_REST_URL_EU: euUrl, UPSTASH_REDIS_REST_TOKEN_EU: TOKEN });

beforeAll(async () => {
  ({ stack: home, origin } = rig);
  eu = euRig.stack;
  homeResp = RespClient.fromUrl(home.redis.url);
  euResp = RespClient.fromUrl(eu.redis.url);
  mf = rig.worker({ sluice: SLUICE, bindings: bindingsFor(eu.bridge.url) });
  await mf.ready;
});
afterAll(() => {
  homeResp?.close();
  euResp?.close();
});

const keys = async (r: RespClient, pattern: string) =>
  ((await r.send(["KEYS", pattern])) as Buffer[]).map(String).sort();
const get = async (r: RespClient, key: string) => {
  const v = await r.send(["GET", key]);
  return v === null ? null : String(v);
};
const tokensOf = (value: string | null) => {
  const [tokens, unit] = (value ?? "").split(":").map(Number);
  return Math.floor((tokens as number) / (unit as number));
};

describe("scope = region", () => {
  it("each region decides in its own Redis, independently; a region without secrets uses the home Redis but keeps its own buckets", async () => {
    const ip = "203.0.113.20";
    expect((await call(mf, "/regional", { ip, cf: EU })).headers.get("sluice-region")).toBe("eu");
    expect((await call(mf, "/regional", { ip, cf: EU })).status).toBe(200);
    expect((await call(mf, "/regional", { ip, cf: EU })).status).toBe(429);
    const us = await call(mf, "/regional", { ip, cf: US });
    expect(us.status).toBe(200);
    expect(us.headers.get("sluice-region")).toBe("us");
    expect(await keys(euResp, "g:regional:*")).toHaveLength(1);
    expect(await keys(homeResp, "g:regional:*")).toHaveLength(1);

    // ap has no secrets: home Redis, separate bucket
    expect((await call(mf, "/regional", { ip, cf: AP })).headers.get("sluice-region")).toBe("ap");
    expect((await call(mf, "/regional", { ip, cf: AP })).status).toBe(200);
    expect((await call(mf, "/regional", { ip, cf: AP })).status).toBe(429);
    expect((await call(mf, "/regional", { ip, cf: US })).status).toBe(200);
    expect(await keys(homeResp, "g:regional:*")).toHaveLength(2);
  });
});

describe("scope = global", () => {
  it("one bucket for the world, in the home region's Redis", async () => {
    expect((await call(mf, "/world", { ip: "203.0.113.30", cf: EU })).status).toBe(200);
    expect((await call(mf, "/world", { ip: "203.0.113.31", cf: EU })).status).toBe(200);
    expect((await call(mf, "/world", { ip: "203.0.113.32", cf: US })).status).toBe(200);
    const refusedEu = await call(mf, "/world", { ip: "203.0.113.33", cf: EU });
    const refusedUs = await call(mf, "/world", { ip: "203.0.113.34", cf: US });
    expect([refusedEu.status, refusedUs.status]).toEqual([429, 429]);
    expect(await keys(homeResp, "g:world:*")).toEqual([
      bucketKey("g", "world", "all", await hashIdentifier(JSON.stringify([["global", "*"]]))),
    ]);
    expect(await keys(euResp, "g:world:*")).toEqual([]);
  });

  it("a refusal by the global bucket leaves nothing in the regional one (refunded)", async () => {
    const a = "203.0.113.40";
    expect((await call(mf, "/mixed", { ip: a, cf: EU })).status).toBe(200);
    expect((await call(mf, "/mixed", { ip: "203.0.113.41", cf: EU })).status).toBe(200);
    const regionalA = bucketKey("g", "mixed", "per-ip", await hashIdentifier(`${JSON.stringify([["ip", a]])}@eu`));
    expect(tokensOf(await get(euResp, regionalA))).toBe(9);
    const refused = await call(mf, "/mixed", { ip: a, cf: EU });
    expect(refused.status).toBe(429);
    expect(refused.json().limit).toBe("site");
    // the refund runs after the response (waitUntil): wait for it, then the bucket is as before
    let tokens = -1;
    for (let i = 0; i < 40 && tokens !== 9; i++) {
      tokens = tokensOf(await get(euResp, regionalA));
      if (tokens !== 9) await sleep(50);
    }
    expect(tokens).toBe(9);
  });

  it("in the home region, regional and global limits go in one call to one Redis", async () => {
    // requests carrying the script: the isolate's off-path ones (its copy of the route's overrides,
    // the lists, the metrics) are not part of a decision
    const calls = (b: RedisStack["bridge"]) =>
      (b.counts().requestsWith.evalsha ?? 0) + (b.counts().requestsWith.eval ?? 0);
    const before = calls(home.bridge);
    expect((await call(mf, "/home-mixed", { ip: "203.0.113.50", cf: US })).status).toBe(200);
    expect(calls(home.bridge) - before).toBe(1);
    const fromEu = calls(eu.bridge);
    const homeBefore = calls(home.bridge);
    expect((await call(mf, "/home-mixed", { ip: "203.0.113.50", cf: EU })).status).toBe(200);
    expect([calls(eu.bridge) - fromEu, calls(home.bridge) - homeBefore]).toEqual([1, 1]);
  });
});

describe("scope = split", () => {
  it("records demand per region; the rebalancer writes proportional shares that never sum above the global figures", async () => {
    const firstCharge = Date.now();
    for (let i = 0; i < 30; i++) await call(mf, "/provider", { ip: `10.3.0.${i}`, cf: EU });
    for (let i = 0; i < 3; i++) await call(mf, "/provider", { ip: `10.4.0.${i}`, cf: US });
    expect(await get(euResp, "g:provider:sms:demand:eu")).toBe("30");
    expect(await get(homeResp, "g:provider:sms:demand:us")).toBe("3");
    // before any rebalance each region holds an equal third: 30 of 90
    expect(origin.seen.filter((s) => s.path === "/provider")).toHaveLength(33);

    await sleep(3_100);
    await (await mf.getWorker()).scheduled({ cron: "* * * * *" });
    const share = async (r: RespClient, region: string) =>
      (await get(r, `g:provider:sms:share:${region}`))?.split(":").map(Number) as [number, number];
    const [euRate, euBurst] = await share(euResp, "eu");
    const [usRate, usBurst] = await share(homeResp, "us");
    const [apRate, apBurst] = await share(homeResp, "ap");
    expect(euRate).toBeGreaterThan(usRate * 5);
    expect(usRate).toBeGreaterThan(apRate);
    expect(apRate).toBeGreaterThanOrEqual(1);
    expect(euRate + usRate + apRate).toBeLessThanOrEqual(90);
    expect(euBurst + usBurst + apBurst).toBeLessThanOrEqual(90);
    expect(await get(euResp, "g:provider:sms:demand:eu")).toBeNull(); // read and reset

    // eu's bucket (empty: it spent its 30) now refills at eu's share, not at the old 30/h
    const refused = await call(mf, "/provider", { ip: "10.3.1.1", cf: EU });
    const refusedAt = Date.now();
    expect(refused.status).toBe(429);
    // a token's time at the new rate, less what refilled since the 30 charges began (the time since
    // the last, now credited at the new rate; before it, at the old, slower one): at most the time
    // from the first charge's send to this answer (3 s or so when idle)
    const wait = refused.json().retry_after_ms as number;
    expect(wait).toBeLessThanOrEqual(Math.ceil(3_600_000 / euRate));
    expect(wait).toBeGreaterThanOrEqual(Math.floor(3_600_000 / euRate) - (refusedAt - firstCharge));
    expect(3_600_000 / 30 - 3_600_000 / euRate).toBeGreaterThan(30_000);
  });

  it("a region the rebalancer cannot reach keeps its last share, and the others split only what is left", async () => {
    const record = async () =>
      Object.fromEntries(
        ((await homeResp.send(["HGETALL", "g:provider:sms:shares"])) as Buffer[])
          .map(String)
          .reduce<string[][]>((acc, v, i) => (i % 2 ? (acc[acc.length - 1]!.push(v), acc) : [...acc, [v]]), []),
      );
    const before = await record();
    const cutOff = startWorker({
      sluice: SLUICE,
      origin: origin.url,
      redisRestUrl: home.bridge.url,
      bindings: bindingsFor("http://127.0.0.1:9"),
    });
    try {
      for (let i = 0; i < 20; i++) await call(cutOff, "/provider", { ip: `10.5.0.${i}`, cf: US });
      await sleep(3_100);
      await (await cutOff.getWorker()).scheduled({ cron: "* * * * *" });
      const after = await record();
      expect(after.eu).toBe(before.eu);
      const rate = (s: string | undefined) => Number(s?.split(":")[0]);
      // the rest, all of it, goes to the reachable regions: us asked, ap keeps its floor
      expect(rate(after.us) + rate(after.ap)).toBe(90 - rate(after.eu));
      expect(rate(after.ap)).toBe(1);
    } finally {
      await cutOff.dispose();
    }
  });

  it("requests nudge the rebalancer through waitUntil, at most once per interval, without the cron", async () => {
    const nudged = startWorker({
      sluice: { ...SLUICE, key_prefix: "n" },
      origin: origin.url,
      redisRestUrl: home.bridge.url,
      bindings: bindingsFor(eu.bridge.url),
    });
    try {
      await call(nudged, "/provider", { ip: "10.6.0.1", cf: EU }); // a fresh isolate waits one interval
      await sleep(300);
      expect(await get(euResp, "n:provider:sms:share:eu")).toBeNull();
      await sleep(2_900);
      await call(nudged, "/provider", { ip: "10.6.0.2", cf: EU });
      let share: string | null = null;
      for (let i = 0; i < 40 && share === null; i++) {
        share = await get(euResp, "n:provider:sms:share:eu");
        if (share === null) await sleep(50);
      }
      expect(share).toMatch(/^\d+:\d+$/);
      expect(await get(homeResp, "n:rebalance:lock")).not.toBeNull();
    } finally {
      await nudged.dispose();
    }
  });

  it("a far home Redis: the budget follows its round trip, for global limits from a far region and at home alike", async () => {
    const far = startWorker({
      sluice: { ...SLUICE, key_prefix: "far", timeout_ms: 50, on_store_error: "open" },
      origin: origin.url,
      redisRestUrl: home.bridge.url,
      bindings: bindingsFor(eu.bridge.url),
    });
    home.bridge.setLatency(120);
    try {
      const r = await call(far, "/world", { ip: "203.0.113.60", cf: EU });
      expect(r.headers.get("sluice-decision")).toBe("allow"); // 120 ms > timeout_ms: the first call has the ceiling
      // the same database from home: no budget per region any more, one per store, from its round trip
      for (const ip of ["203.0.113.61", "203.0.113.62"]) {
        // the bucket holds 3
        expect((await call(far, "/world", { ip, cf: US })).headers.get("sluice-decision")).toBe("allow");
      }
    } finally {
      home.bridge.setLatency(0);
      await far.dispose();
    }
  });
});
