import { readFileSync } from "node:fs";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { until } from "../support/pace.js";
import { call, startWorker, type DemoOrigin, type RedisStack, sleep, useStack } from "./stack.js";

const ADMIN = "admin-token-0123456789abcdef";
const SLUICE: SluiceInput = {
  key_prefix: "i",
  // decisions and claims are Redis's, even for 300 requests at once on a loaded machine
  timeout_ms: 10_000,
  routes: [
    { name: "orders", match: "/orders", idempotency: { principal: "header:x-user" } },
    { name: "strict", match: "/strict", idempotency: { required: true } },
    { name: "patient", match: "/patient", idempotency: { wait: "3s" } },
    { name: "short", match: "/short", idempotency: { lease: "1s" } },
    { name: "held", match: "/held", idempotency: { on_origin_error: "hold" } },
    { name: "derived", match: "/derived", idempotency: { derive: true, ignore: ["sent_at"] } },
    { name: "tiny", match: "/tiny", idempotency: { max_body: 10 } },
    { name: "metered", match: "/metered", idempotency: {}, limits: [{ name: "per-ip", rate: 2, period: "1h" }] },
    { name: "storm", match: "/chaos/*", idempotency: {} },
  ],
};

const rig = useStack({
  sluice: SLUICE,
  instances: 3,
  bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
  origin: { chaos: { failRate: 0.05, maxDelayMs: 40 } },
});
let stack: RedisStack;
let origin: DemoOrigin;
let workers: readonly Miniflare[];
let mf: Miniflare;
beforeAll(() => {
  ({ stack, origin, workers, mf } = rig);
});

const post = (
  w: Miniflare,
  path: string,
  key: string | undefined,
  body: string,
  headers: Record<string, string> = {},
) =>
  call(w, path, {
    method: "POST",
    body,
    headers: {
      "content-type": "application/json",
      ...(key === undefined ? {} : { "idempotency-key": key }),
      ...headers,
    },
  });
const seenWith = (key: string) => origin.seen.filter((s) => s.headers["idempotency-key"] === key);
/** Until a request with that key has reached the origin (its claim is taken, its call under way). */
const reaching = async (key: string) =>
  expect(
    await until(
      async () => seenWith(key).length,
      (n) => n > 0,
    ),
  ).toBe(1);
const ledger = async () =>
  (await call(mf, "/__sluice/ledger?count=1000", { headers: { authorization: `Bearer ${ADMIN}` } })).json()
    .entries as Array<Record<string, string>>;
/** The answer is stored after the response (waitUntil): ask until the replay comes back. */
async function untilReplayed(path: string, key: string, body: string, headers: Record<string, string> = {}) {
  for (let i = 0; i < 40; i++) {
    const r = await post(mf, path, key, body, headers);
    if (r.headers.get("idempotent-replayed") === "true") return r;
    await sleep(50);
  }
  return post(mf, path, key, body, headers);
}

describe("one side effect per key", () => {
  it("forwards the first arrival with a fencing token and replays the stored answer to duplicates", async () => {
    const first = await post(mf, "/orders?status=201", "order-1", '{"sku":"a","qty":1}', { "x-user": "u1" });
    expect(first.status).toBe(201);
    expect(first.headers.get("sluice-decision")).toBe("allow");
    const seen = seenWith("order-1");
    expect(seen).toHaveLength(1);
    expect(Number(seen[0]!.headers["sluice-fencing-token"])).toBeGreaterThan(0);

    const replay = await untilReplayed("/orders?status=201", '"order-1"', '{"qty":1,"sku":"a"}', { "x-user": "u1" }); // quoted key, reordered JSON
    expect(replay.status).toBe(201);
    expect(replay.text).toBe(first.text);
    expect(replay.headers.get("sluice-decision")).toBe("replay");
    expect(replay.headers.get("content-type")).toBe("application/json");
    expect(seenWith("order-1")).toHaveLength(1);

    // another principal with the same key is another request entirely
    expect(
      (await post(mf, "/orders", "order-1", '{"sku":"a","qty":1}', { "x-user": "u2" })).headers.get(
        "idempotent-replayed",
      ),
    ).toBeNull();
    expect(seenWith("order-1")).toHaveLength(2);
  });

  it("answers 409 with Retry-After while the first is in flight, and 422 when the key comes with another request", async () => {
    // in flight for 3 s once it reaches the origin: the duplicate comes meanwhile, however slow the machine
    const slow = post(mf, "/orders?delay=3000", "order-2", "{}", { "x-user": "u1" });
    await reaching("order-2");
    const dup = await post(workers[1] as Miniflare, "/orders?delay=3000", "order-2", "{}", { "x-user": "u1" });
    expect(dup.status).toBe(409);
    expect(dup.headers.get("retry-after")).toBe("1");
    expect(dup.json()).toMatchObject({ title: "Request in flight" });
    expect((await slow).status).toBe(200);
    const other = await post(mf, "/orders", "order-2", '{"different":true}', { "x-user": "u1" });
    expect(other.status).toBe(422);
    expect(other.headers.get("content-type")).toBe("application/problem+json");
    expect(seenWith("order-2")).toHaveLength(1);
  });

  it("refuses a missing key where one is required, and a malformed key anywhere, with 400", async () => {
    expect((await post(mf, "/strict", undefined, "{}")).status).toBe(400);
    expect((await post(mf, "/orders", "x".repeat(256), "{}")).status).toBe(400);
    expect((await post(mf, "/orders", '""', "{}")).status).toBe(400); // a quoted empty key
    expect((await post(mf, "/orders", undefined, "{}")).status).toBe(200); // not required: passes unguarded
  });

  it("with wait, a duplicate waits for the first answer and replays it", async () => {
    const first = post(mf, "/patient?delay=500", "p-1", "{}");
    await reaching("p-1");
    const dup = await post(workers[2] as Miniflare, "/patient?delay=500", "p-1", "{}");
    expect(dup.status).toBe(200);
    expect(dup.headers.get("idempotent-replayed")).toBe("true");
    expect(dup.text).toBe((await first).text);
    expect(seenWith("p-1")).toHaveLength(1);
  });

  it("a lease that ran out (its holder died mid-call) makes the key indeterminate, never a takeover: the origin may have acted", async () => {
    // the holder's isolate goes away mid-call: nobody renews its claim any more
    const doomed = startWorker({ sluice: SLUICE, origin: origin.url, redisRestUrl: stack.bridge.url });
    const stale = post(doomed, "/short", "s-1", "{}", { "x-demo-delay": "1800" }).catch(() => undefined);
    for (let i = 0; i < 200 && seenWith("s-1").length === 0; i++) await sleep(25);
    expect(seenWith("s-1")).toHaveLength(1);
    await doomed.dispose();
    await stale;
    await sleep(1_200);
    // the request reached the origin before its holder vanished: running the duplicate would be a second order
    const dup = await post(workers[1] as Miniflare, "/short", "s-1", "{}");
    expect(dup.status).toBe(409);
    expect(dup.json()).toMatchObject({ title: "Outcome indeterminate" });
    expect(seenWith("s-1")).toHaveLength(1);
    const events = (await ledger()).map((e) => e.event);
    expect(events).toContain("lapsed");
  });

  it("a live holder's claim is renewed past its lease: a duplicate mid-call is refused, not run", async () => {
    const slow = post(mf, "/short", "s-2", "{}", { "x-demo-delay": "4000" });
    await reaching("s-2");
    await sleep(1_600); // past the 1 s lease (renewed every third of it), well before the answer
    const dup = await post(workers[1] as Miniflare, "/short", "s-2", "{}");
    expect(dup.status).toBe(409);
    expect(dup.json()).toMatchObject({ title: "Request in flight" });
    expect((await slow).status).toBe(200);
    expect(seenWith("s-2")).toHaveLength(1);
  });

  it("a stale owner can neither renew, complete nor release (the script checks the holder)", async () => {
    const held = post(mf, "/orders?delay=3000", "s-3", "{}", { "x-user": "u9" });
    await reaching("s-3");
    const entry = (await ledger()).find((e) => e.event === "claim" && e.route === "orders" && e.status === "")!;
    const sha = await rig.redis.scriptLoad(readFileSync("lua/idempotency.lua", "utf8"));
    const keys = [`i:idem:orders:${entry.key}`, "i:idem:orders:fence:-", "i:ledger"];
    const asStranger = (op: string, ...rest: Array<string | number>) =>
      rig.redis.evalsha(sha, keys, [op, "not-the-holder", "orders", entry.key, 1000, ...rest]);
    expect(await asStranger("renew", 60_000)).toEqual(["not_owner"]);
    expect(await asStranger("complete", 200, "[]", "", 1, 60_000)).toEqual(["not_owner"]);
    expect(await asStranger("release", "")).toEqual(["not_owner"]);
    expect((await held).status).toBe(200);
    const events = (await ledger()).filter((e) => e.key === entry.key).map((e) => e.event);
    expect(events).toEqual(expect.arrayContaining(["stale_complete", "stale_release", "complete"]));
  });

  it("a response too large to store is completed without a body; duplicates get a 409 saying so", async () => {
    expect((await post(mf, "/tiny", "t-1", "{}")).status).toBe(200);
    let dup = await post(mf, "/tiny", "t-1", "{}");
    for (let i = 0; i < 40 && dup.json().title === "Request in flight"; i++) {
      await sleep(50);
      dup = await post(mf, "/tiny", "t-1", "{}");
    }
    expect(dup.status).toBe(409);
    expect(dup.json()).toMatchObject({ title: "Completed, answer not stored" });
  });
});

describe("origin failures", () => {
  it("a 5xx releases the claim by default, so a retry reaches the origin again", async () => {
    expect((await post(mf, "/orders?status=503", "f-1", "{}")).status).toBe(503);
    expect((await post(mf, "/orders", "f-1", "{}")).status).toBe(200);
    expect(seenWith("f-1")).toHaveLength(2);
  });

  it("with hold, the key becomes indeterminate until an operator resolves it", async () => {
    expect((await post(mf, "/held", "h-1", "{}", { "x-demo-status": "500" })).status).toBe(500);
    const blocked = await post(mf, "/held", "h-1", "{}");
    expect(blocked.status).toBe(409);
    expect(blocked.json()).toMatchObject({ title: "Outcome indeterminate" });
    const entry = (await ledger()).find((e) => e.event === "indeterminate" && e.route === "held");
    expect(entry).toBeDefined();
    const resolve = (body: Record<string, unknown>, token = ADMIN) =>
      call(mf, "/__sluice/idempotency/resolve", {
        method: "POST",
        body: JSON.stringify(body),
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      });
    expect(
      (await resolve({ route: "held", key: entry!.key, action: "replay", status: 201, body: '{"resolved":true}' }))
        .status,
    ).toBe(200);
    const replayed = await post(mf, "/held", "h-1", "{}");
    expect([replayed.status, replayed.text, replayed.headers.get("idempotent-replayed")]).toEqual([
      201,
      '{"resolved":true}',
      "true",
    ]);
    expect((await resolve({ route: "held", key: entry!.key, action: "release" })).status).toBe(200);
    expect((await post(mf, "/held", "h-1", "{}")).status).toBe(200);
    expect(seenWith("h-1")).toHaveLength(2);
    expect((await resolve({ route: "held", key: "0".repeat(32), action: "release" })).status).toBe(404);
  });
});

describe("around the key", () => {
  it("derives a key from the canonical body when asked, ignoring listed fields", async () => {
    expect((await post(mf, "/derived", undefined, '{"to":"+100","text":"hi","sent_at":1}')).status).toBe(200);
    const again = await untilReplayed(
      "/derived",
      undefined as unknown as string,
      '{"text":"hi","to":"+100","sent_at":2}',
    );
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(origin.seen.filter((s) => s.path === "/derived")).toHaveLength(1);
  });

  it("runs rate limits first, and a replay costs no token", async () => {
    expect((await post(mf, "/metered", "m-1", "{}", {})).status).toBe(200);
    await untilReplayed("/metered", "m-1", "{}");
    // the replay's refund goes after the response (waitUntil): until the bucket has it back
    const peek = async () =>
      (
        await call(mf, "/__sluice/buckets/metered/per-ip?ip=203.0.113.1", {
          headers: { authorization: `Bearer ${ADMIN}` },
        })
      ).json().remaining;
    expect(await until(peek, (left) => left === 1)).toBe(1);
    expect((await post(mf, "/metered", "m-2", "{}")).status).toBe(200);
    const refused = await post(mf, "/metered", "m-3", "{}");
    expect(refused.status).toBe(429);
  });

  it("the ledger and the resolve route need the admin token", async () => {
    expect((await call(mf, "/__sluice/ledger")).status).toBe(401);
    expect(
      (await call(mf, "/__sluice/ledger", { headers: { authorization: `Bearer ${"x".repeat(ADMIN.length)}` } })).status,
    ).toBe(401);
    expect((await call(mf, "//__SLUICE/ledger")).status).toBe(401); // path tricks reach the admin API, never the origin
    const events = new Set((await ledger()).map((e) => e.event));
    for (const e of ["claim", "complete", "release", "lapsed", "indeterminate", "resolve_replay", "resolve_release"])
      expect(events, e).toContain(e);
  });
});

describe("with the limits' Redis down", () => {
  it("fails open for the limits but still guards the side effect", async () => {
    const w = startWorker({
      sluice: {
        key_prefix: "i2",
        timeout_ms: 300,
        on_store_error: "open",
        regions: { eu: { continents: ["EU"] } },
        routes: [{ name: "pay", match: "/pay", idempotency: {}, limits: [{ name: "per-ip", rate: 5, period: "1m" }] }],
      },
      origin: origin.url,
      redisRestUrl: stack.bridge.url,
      bindings: { UPSTASH_REDIS_REST_URL_EU: "http://127.0.0.1:9", UPSTASH_REDIS_REST_TOKEN_EU: "x" },
    });
    try {
      const fromEu = () =>
        call(w, "/pay", {
          method: "POST",
          body: "{}",
          cf: { continent: "EU" },
          headers: { "content-type": "application/json", "idempotency-key": "d-1" },
        });
      const first = await fromEu();
      expect(first.headers.get("sluice-decision")).toBe("degraded");
      let dup = await fromEu();
      for (let i = 0; i < 40 && dup.headers.get("idempotent-replayed") !== "true"; i++) {
        await sleep(50);
        dup = await fromEu();
      }
      expect(dup.headers.get("sluice-decision")).toBe("replay");
      expect(seenWith("d-1")).toHaveLength(1);
    } finally {
      await w.dispose();
    }
  });
});

describe("a duplicate storm", () => {
  it("100 keys × 30 concurrent duplicates over three Worker instances: one side effect per successful key", async () => {
    const keys = Array.from({ length: 100 }, (_, i) => `storm-${i}`);
    const responses: Array<{
      key: string;
      status: number;
      text: string;
      replayed: boolean;
      problem: boolean;
      fromOrigin: boolean;
    }> = [];
    for (let b = 0; b < keys.length; b += 10) {
      const batch = keys
        .slice(b, b + 10)
        .flatMap((key) => Array.from({ length: 30 }, (_, j) => ({ key, w: workers[j % 3] as Miniflare })));
      const rs = await Promise.all(batch.map(({ key, w }) => post(w, `/chaos/${key}`, key, `{"key":"${key}"}`)));
      rs.forEach((r, i) =>
        responses.push({
          key: batch[i]!.key,
          status: r.status,
          text: r.text,
          replayed: r.headers.get("idempotent-replayed") === "true",
          problem: r.headers.get("content-type") === "application/problem+json",
          fromOrigin: r.headers.get("x-origin") === "demo",
        }),
      );
    }
    // nothing unhandled: every answer is the origin's own, a replay, or a problem
    expect(responses.every((r) => r.fromOrigin || r.replayed || r.problem)).toBe(true);

    let succeededFirst = 0;
    let retriedAfter500 = 0;
    for (const key of keys) {
      const hits = origin.seen.filter((s) => s.path === `/chaos/${key}`);
      const ok = hits.filter((s) => (s.status ?? 0) < 500);
      expect(ok.length, key).toBeLessThanOrEqual(1); // never two side effects
      if (hits[0] && (hits[0].status ?? 0) < 500) {
        succeededFirst++;
        expect(hits, key).toHaveLength(1); // the origin saw it exactly once
        const original = responses.find((r) => r.key === key && r.fromOrigin && r.status < 500)!.text;
        for (const r of responses.filter((x) => x.key === key && x.replayed)) expect(r.text).toBe(original);
      }
    }
    // after a 500 the claim is released: the next attempt reaches the origin again
    for (const key of keys) {
      const hits = origin.seen.filter((s) => s.path === `/chaos/${key}`);
      if (hits.length > 0 && hits.every((s) => (s.status ?? 0) >= 500)) {
        await post(mf, `/chaos/${key}`, key, `{"key":"${key}"}`);
        expect(origin.seen.filter((s) => s.path === `/chaos/${key}`).length).toBe(hits.length + 1);
        retriedAfter500++;
      }
    }
    const replays = responses.filter((r) => r.replayed).length;
    const conflicts = responses.filter((r) => r.status === 409).length;
    const originCalls = keys.reduce((n, k) => n + origin.seen.filter((s) => s.path === `/chaos/${k}`).length, 0);
    console.log(
      `storm figures: ${responses.length} requests, ${keys.length} keys, ${originCalls} origin calls, ${succeededFirst} keys succeeded first time (each reached the origin exactly once), ${replays} replays, ${conflicts} 409s, ${retriedAfter500} keys retried after a 500 and reached the origin again, duplicates of a side effect: 0`,
    );
    expect(succeededFirst).toBeGreaterThan(80);
  }, 120_000);
});
