/**
 * The Redis key names and the fingerprint a request leaves, through the middlewares against a real
 * Redis, pinned to what the code wrote before the digest, the canonical JSON and the identity hash
 * were each written once (issue 31): a derived key, a record's name or a fingerprint that moved on
 * upgrade would turn a retry into a new order (or a 422), and a bucket's or a lock's name that
 * moved would lose a deployment's buckets and locks. The values were recorded from that code.
 * test/unit/hash-pins.test.ts pins the same hashes function by function.
 */
import { describe, expect, it } from "vitest";
import { background, countedApp, gate, middlewareRig } from "../support/middleware-rig.js";
import { idempotency, rateLimit, session, type IdempotencyOptions } from "../../src/index.js";

const rig = middlewareRig("pins");

const post = (body: string, headers: Record<string, string> = {}): RequestInit => ({
  method: "POST",
  body,
  headers: { "CF-Connecting-IP": "198.51.100.20", "content-type": "application/json", ...headers },
});

/** The file's keys under `prefix`, sorted. */
async function keysOf(prefix: string): Promise<string[]> {
  return ((await rig.db.redis.keys(`${prefix}:*`)) as string[]).sort();
}

/**
 * `calls` calls (the later ones replays) through idempotency() with `extra`: the key the handler
 * saw, the record's name and fingerprint.
 */
async function guarded(prefix: string, extra: IdempotencyOptions, init: RequestInit, calls = 1) {
  const { app } = countedApp(
    idempotency(rig.options({ ...extra, key_prefix: prefix })),
    (c) => c.json({ key: c.get("sluice").idempotencyKey }, 201),
    { path: "/orders" },
  );
  const bg = background();
  const res = await app.request("/orders?x=1", init, {}, bg.ctx);
  const { key } = (await res.json()) as { key: string };
  await bg.settled();
  for (let n = 1; n < calls; n++) await (await app.request("/orders?x=1", init)).text();
  const record = (await keysOf(prefix)).find((k) => /:idem:app:[0-9a-f]{32}$/.test(k)) ?? "";
  return { key, record, fp: await rig.db.redis.hget(record, "fp") };
}

describe("the names and fingerprints a request leaves in Redis, as before", () => {
  it("a key derived from the canonical body (derive = true)", async () => {
    const got = await guarded("pinA", { derive: true, ignore: ["ts"] }, post('{ "ts": 5, "b": 1, "a": [2, 1.0] }'));
    expect(got).toEqual({
      fp: "7691057fcfb3d293cb6ba87e98c66fd7",
      key: "7691057fcfb3d293cb6ba87e98c66fd785a01d0ee6670c6a1dfa85adcbcff468",
      record: "pinA:idem:app:e2bb10978e7c89b10dd2b8e14c67e2c5",
    });
  });

  it("a key from body fields (derive = { fields })", async () => {
    const body = '{"user": 7, "sku": {"b": "x", "a": "é"}, "n": 1}';
    const got = await guarded("pinB", { derive: { fields: ["/user", "/sku"], window: "1m" } }, post(body));
    expect(got).toEqual({
      fp: "3d1e9ec0c1f89dd861687badf6d8f226",
      key: "17bb8891b2b4994c60284bf0b4d7cd0c2128f4e3ff49f39f01ab4bda7c2ccf31",
      record: "pinB:idem:app:a43b7533b246cd3150d641556cc10904",
    });
  });

  it("the client's Idempotency-Key, under an auto principal from its credential, and its replay buckets", async () => {
    const init = post('{"b": 1, "a": 2}', { "Idempotency-Key": "order-42", authorization: "Bearer sk_live_1" });
    const got = await guarded("pinC", {}, init, 2);
    expect(got).toEqual({
      fp: "10a9f638bad0fc8c9a08a96dd8db408c",
      key: "order-42",
      record: "pinC:idem:app:771e3edbb1ca8142187b2f2f616c25b9",
    });
    expect((await keysOf("pinC")).filter((k) => k.includes(":replays:"))).toEqual([
      "pinC:idem:app:replays:168654a20e8c7e2e16d20a157b40f096",
      "pinC:idem:app:replays:1e5a9907c7ba86c331f68bf82da9f97c",
    ]);
  });

  it("a session's lock", async () => {
    const g = gate();
    const { app } = countedApp(
      session(rig.options({ key: "header:x-session-id", key_prefix: "pinD" })),
      async (c) => {
        await g.wait();
        return c.text("ok");
      },
      { path: "/tool" },
    );
    const call = app.request("/tool", post("{}", { "x-session-id": "s-1" }));
    await g.reached();
    const locks = (await keysOf("pinD")).filter((k) => k.includes(":session:"));
    g.open();
    expect((await call).status).toBe(200);
    expect(locks).toEqual(["pinD:session:154045ff0c604674e433299264a57dbd", "pinD:session:fence"]);
  });

  it("the buckets of a limit per IP, per key and path, and the world's", async () => {
    const limits = [
      { name: "per-ip", key: "ip", rate: 10, period: "1m" },
      { name: "per-key", key: ["header:x-api-key", "path"], rate: 10, period: "1m" },
      { name: "all", key: "global", scope: "global", rate: 100, period: "1m" },
    ] as const;
    const { app } = countedApp(rateLimit(rig.options({ limits, key_prefix: "pinE" })), (c) => c.text("ok"));
    expect((await app.request("/orders", post("{}", { "x-api-key": "k" }))).status).toBe(200);
    const buckets = (await keysOf("pinE")).filter((k) => /:[0-9a-f]{32}$/.test(k));
    expect(buckets).toEqual([
      "pinE:app:all:605b3c48aaa714bc5543fb0c14dc85c1",
      "pinE:app:per-ip:f409d4f8f112191aacf48c07a893d855",
      "pinE:app:per-key:6dfd2b6cf425c00082d42d3db8acea2d",
    ]);
  });
});
