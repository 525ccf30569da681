/*
 * Issue 29, finding 10: one client filled a bounded queue for everybody. On a per-IP route of one
 * request an hour with `queue.max_depth = 10`, one IP queued 10 jobs and every other client got
 * "Queue full". Now each client holds at most its share (`queue.max_per_client`, by default a
 * tenth of `max_depth`), checked and counted in the same script as the depth; past it, that client
 * alone gets the overflow answer. Its count falls as its jobs are done (delivered, dead-lettered)
 * and an entry whose end was never counted lapses on its own. Replayed through the gateway in
 * workerd with Miniflare's real Queues and a real Redis.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import { loadConfig, type Route } from "../../src/config/index.js";
import type { SluiceInput } from "../../src/config/schema.js";
import type { Env } from "../../src/env.js";
import { clientOf, enterQueue, leaveQueue } from "../../src/features/shedding/queue/depth.js";
import { envConnections } from "../../src/region/index.js";
import { Runtime } from "../../src/runtime.js";
import type { Store } from "../../src/store/redis.js";
import { call, sleep, TOKEN, useStack } from "../integration/stack.js";

// one request an hour per IP: the first goes through, the rest wait in the queue (a minute's delay) for the whole test
const hourlyPerIp = [{ name: "per-ip", key: "ip", rate: 1, period: "1h" }];
// a loaded machine's Redis round trip must not turn a decision local (the default budget is 50 ms)
const TIMEOUT_MS = 2_000;

/** The attack's configuration as the issue gives it: max_depth only, the share its default. */
const ATTACKED: SluiceInput = {
  key_prefix: "qa",
  timeout_ms: TIMEOUT_MS,
  routes: [{ name: "sms", match: "/sms", on_limit: "queue", queue: { max_depth: 10 }, limits: hourlyPerIp }],
};

const SLUICE: SluiceInput = {
  key_prefix: "qs",
  timeout_ms: TIMEOUT_MS,
  routes: [
    {
      name: "shared",
      match: "/shared",
      on_limit: "queue",
      queue: { max_depth: 10, max_per_client: 3 },
      limits: hourlyPerIp,
    },
    {
      name: "cushioned",
      match: "/cushioned",
      on_limit: "queue",
      queue: { max_depth: 10, max_per_client: 1 },
      fallback: { status: 200, content_type: "text/plain", body: "busy, try later" },
      limits: hourlyPerIp,
    },
    {
      // a second's token per IP: jobs are delivered within seconds; one failing job is dead-lettered after one retry
      name: "drain",
      match: "/drain",
      on_limit: "queue",
      queue: { max_depth: 10, max_per_client: 2, retry_delays: ["1s"], max_age: "1m" },
      limits: [{ name: "per-ip", key: "ip", rate: 1, period: "1s" }],
    },
  ],
};

const post = (mf: Miniflare, path: string, ip: string, body = "x") => call(mf, path, { method: "POST", ip, body });

describe("one client against a bounded queue (max_depth = 10, the share left to its default)", () => {
  const rig = useStack({ sluice: ATTACKED, queues: true });
  let mf: Miniflare;
  beforeAll(() => {
    mf = rig.mf;
  });

  it("one IP queues its share (a tenth of max_depth), not the whole queue; others still queue", async () => {
    expect((await post(mf, "/sms", "198.51.100.1")).status).toBe(200); // its hour's one admission
    // the attack: ten at once from one IP, every one refused by its limit (on main all ten were queued)
    const burst = await Promise.all(Array.from({ length: 10 }, (_, i) => post(mf, "/sms", "198.51.100.1", `a-${i}`)));
    expect(burst.filter((r) => r.status === 202)).toHaveLength(1);
    const shed = burst.filter((r) => r.status === 503);
    expect(shed).toHaveLength(9);
    expect(shed[0]?.headers.get("content-type")).toBe("application/problem+json");
    expect(shed[0]?.json()).toMatchObject({ title: "Queue full", reason: "max_per_client" });
    expect(String(shed[0]?.json().detail)).toContain("this client's share");
    expect(Number(shed[0]?.headers.get("retry-after"))).toBeGreaterThan(0);

    // another client is not shut out: its refused request is queued
    expect((await post(mf, "/sms", "198.51.100.2")).status).toBe(200);
    expect((await post(mf, "/sms", "198.51.100.2")).status).toBe(202);

    // max_depth stays exact: ten clients fill the queue, the eleventh gets "Queue full" for max_depth
    for (let i = 3; i <= 10; i++) {
      expect((await post(mf, "/sms", `198.51.100.${i}`)).status).toBe(200);
      expect((await post(mf, "/sms", `198.51.100.${i}`)).status).toBe(202);
    }
    expect((await post(mf, "/sms", "198.51.100.11")).status).toBe(200);
    const full = await post(mf, "/sms", "198.51.100.11");
    expect(full.status).toBe(503);
    expect(full.json()).toMatchObject({ reason: "max_depth" });
  });
});

describe("a client's share of a bounded queue (queue.max_per_client)", () => {
  const rig = useStack({ sluice: SLUICE, queues: true });
  let mf: Miniflare;
  beforeAll(() => {
    mf = rig.mf;
  });

  it("holds queue.max_per_client exactly under a concurrent burst, and answers past it with the fallback page", async () => {
    expect((await post(mf, "/shared", "198.51.100.20")).status).toBe(200);
    const burst = await Promise.all(
      Array.from({ length: 8 }, (_, i) => post(mf, "/shared", "198.51.100.20", `s-${i}`)),
    );
    expect(burst.filter((r) => r.status === 202)).toHaveLength(3);
    expect(burst.filter((r) => r.status === 503)).toHaveLength(5);

    expect((await post(mf, "/cushioned", "198.51.100.21")).status).toBe(200);
    expect((await post(mf, "/cushioned", "198.51.100.21")).status).toBe(202);
    const cushioned = await post(mf, "/cushioned", "198.51.100.21");
    expect(cushioned.status).toBe(200);
    expect(cushioned.text).toBe("busy, try later");
    expect(cushioned.headers.get("sluice-decision")).toBe("fallback");
  });

  it("gives a client's places back as its jobs are delivered or dead-lettered, leaving no key behind", async () => {
    const ip = "198.51.100.30";
    // the other routes' clients, whose jobs wait for an hour's token
    const others = ((await rig.redis.keys("qs:queue:*:client:*")) as string[]).sort();
    expect((await post(mf, "/drain", ip)).status).toBe(200);
    const burst = await Promise.all([post(mf, "/drain?status=500", ip, "fails"), post(mf, "/drain", ip, "lands")]);
    expect(burst.map((r) => r.status)).toEqual([202, 202]);
    expect((await post(mf, "/drain", ip)).json()).toMatchObject({ reason: "max_per_client" });
    const ids = burst.map((r) => r.json().job_id as string);

    const done = async () => {
      const states = await Promise.all(ids.map(async (id) => (await call(mf, `/__sluice-jobs/${id}`)).json()));
      return states[0]?.dead_letter === true && states[1]?.status === "delivered";
    };
    for (let i = 0; i < 300 && !(await done()); i++) await sleep(100);
    expect(await done()).toBe(true);

    // nothing of the client's count is left: the set is deleted with its last job
    expect(((await rig.redis.keys("qs:queue:*:client:*")) as string[]).sort()).toEqual(others);
    // and the client queues again (its bucket may have a token by now: then it is admitted first)
    const again: number[] = [];
    for (let i = 0; i < 3 && !again.includes(202); i++) again.push((await post(mf, "/drain", ip)).status);
    expect(again).toContain(202);
    expect(again).not.toContain(503);
  });

  describe("a count whose job's end never came (lua/queue-depth.lua)", () => {
    const config = () => {
      const loaded = loadConfig({ ORIGIN_URL: "http://origin.test", SLUICE });
      if (!loaded.ok) throw loaded.error;
      return loaded.config;
    };
    const storeOf = (): Store => {
      const c = config();
      const env: Env = { UPSTASH_REDIS_REST_URL: rig.stack.bridge.url, UPSTASH_REDIS_REST_TOKEN: TOKEN };
      return new Runtime().stores(envConnections(env, c.home_region), c).offPath() as Store;
    };
    const drain = () => config().routes.find((r) => r.name === "drain") as Route;

    it("lapses once its job could no longer be delivered (max_age), however often the client comes back", async () => {
      // its own key prefix: nothing the Worker's jobs count is in these keys
      const store = storeOf();
      const route = drain();
      const client = await clientOf(route.limits[0] as Route["limits"][number], {
        ip: "192.0.2.77",
        matchPath: "/drain",
        headers: new Headers(),
        url: new URL("https://x.test/drain"),
      });
      const t0 = 1_000_000;
      // two jobs whose consumer died before counting them out: the client's share (2) is taken
      expect(await enterQueue(store, "qsl", route, t0, { id: "lost-1", client })).toMatchObject({
        admitted: true,
        mine: 1,
      });
      expect(await enterQueue(store, "qsl", route, t0 + 1, { id: "lost-2", client })).toMatchObject({ mine: 2 });
      expect(await enterQueue(store, "qsl", route, t0 + 30_000, { id: "j3", client })).toMatchObject({
        admitted: false,
        full: "client",
      });
      // a minute (max_age) after each was queued it no longer counts, though the client kept coming
      expect(await enterQueue(store, "qsl", route, t0 + 60_000, { id: "j4", client })).toMatchObject({
        admitted: true,
        mine: 2,
      });
      expect(await enterQueue(store, "qsl", route, t0 + 60_001, { id: "j5", client })).toMatchObject({
        admitted: true,
        mine: 2,
      });
      expect(await enterQueue(store, "qsl", route, t0 + 60_002, { id: "j6", client })).toMatchObject({
        full: "client",
      });
      // a job counted out is counted out once: its entry goes, the other stays
      await leaveQueue(store, "qsl", route, t0 + 60_000, { id: "j4", client });
      await leaveQueue(store, "qsl", route, t0 + 60_000, { id: "j4", client });
      expect(await enterQueue(store, "qsl", route, t0 + 60_003, { id: "j7", client })).toMatchObject({
        admitted: true,
        mine: 2,
      });
      const keys = (await rig.redis.keys("qsl:queue:*:client:*")) as string[];
      expect(keys).toHaveLength(1);
      // the key lives no longer than its newest entry (max_age)
      expect(Number(await rig.redis.pttl(keys[0] as string))).toBeLessThanOrEqual(60_000);
    });
  });
});
