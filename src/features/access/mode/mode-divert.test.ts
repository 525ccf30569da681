import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startOrigin, type DemoOrigin } from "@sluice/dev";
import { background, countedApp, middlewareRig, TIMEOUT_MS } from "../../../../test/support/middleware-rig.js";
import { sluice } from "../../../index.js";
import { listsKey, versionKey } from "../../../store/layout.js";
import { modeField, type RouteMode } from "./store.js";

/**
 * The `divert` switch in an app (`sluice(config)` without an origin: the handler is the origin),
 * in Node against a real Redis: the divert origin is asked after idempotency, under the claim,
 * and its answer is what the claim stores; the app's handler is never called.
 */
const { db, connection, prefix } = middlewareRig("mdv");
let replica: DemoOrigin;
beforeAll(async () => {
  replica = await startOrigin();
});
afterAll(async () => {
  await replica?.close();
});

const url = (path: string) => `http://sluice.test${path}`;
const post = (key: string, body: string): RequestInit => ({
  method: "POST",
  body,
  headers: { "CF-Connecting-IP": "198.51.100.9", "content-type": "application/json", "idempotency-key": key },
});

describe('sluice(config) with the "divert" switch', () => {
  it("diverts a first arrival under its claim; its duplicate replays the divert origin's answer", async () => {
    const key_prefix = prefix();
    const switched: RouteMode = {
      kind: "mode",
      route: "orders",
      mode: "divert",
      until: Date.now() + 600_000,
      by: "test",
    };
    await db.redis.hset(listsKey(key_prefix), { [modeField("orders")]: JSON.stringify(switched) });
    await db.redis.incr(versionKey(key_prefix));
    const routes = [
      {
        name: "orders",
        match: "/orders",
        divert_url: `${replica.url}/replica`,
        divert_on: ["5xx" as const],
        idempotency: { required: true },
      },
    ];
    const { app, calls } = countedApp(sluice({ timeout_ms: TIMEOUT_MS, key_prefix, routes }, connection()), (c) =>
      c.text("the app's own handler"),
    );
    const bg = background();
    const first = await app.request(url("/orders?status=201"), post("mdv-1", '{"n":1}'), {}, bg.ctx);
    expect(first.status).toBe(201);
    expect(first.headers.get("sluice-decision")).toBe("diverted");
    const answer = await first.text();
    await bg.settled();
    const dup = await app.request(url("/orders?status=201"), post("mdv-1", '{"n":1}'), {}, background().ctx);
    expect(dup.headers.get("sluice-decision")).toBe("replay");
    expect(await dup.text()).toBe(answer);
    expect(calls.n).toBe(0);
    const sent = replica.seen.filter((s) => s.path === "/replica/orders");
    expect(sent).toHaveLength(1);
    expect(sent[0]?.headers["idempotency-key"]).toBe("mdv-1");
  });
});
