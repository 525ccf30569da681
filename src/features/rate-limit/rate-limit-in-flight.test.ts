import { afterEach, describe, expect, it } from "vitest";
import { background, countedApp, from, gate, middlewareRig } from "../../../test/support/middleware-rig.js";
import { rateLimit, type RateLimitOptions } from "../../index.js";

/*
 * rateLimit() with a concurrency limit, in Node against a real Redis: a slot is held while the
 * handler runs and while its response body is read, and freed (through `waitUntil`) once the body
 * has been read to its end, cancelled, or when the handler failed; by the isolate itself when
 * Redis is down under on_store_error = "local".
 */
const rig = middlewareRig("inflight");
const { db } = rig;
afterEach(() => db.stack.bridge.setMode("normal"));

const ONE_AT_A_TIME: RateLimitOptions["limits"] = [
  { name: "one", key: "header:x-api-key", algorithm: "concurrency", limit: 1, lease: "30s" },
];
const KEY = from("198.51.100.20", { "x-api-key": "k" });

/** An app whose handler waits at `g` (when given), then streams two chunks. */
function appWith(extra: Partial<RateLimitOptions> = {}, g?: { wait: () => Promise<void> }) {
  return countedApp(rateLimit(rig.options({ limits: ONE_AT_A_TIME, ...extra })), async (c) => {
    await g?.wait();
    const parts = ["a", "b"];
    return c.body(
      new ReadableStream<Uint8Array>({
        pull: (ctl) => {
          const next = parts.shift();
          if (next === undefined) ctl.close();
          else ctl.enqueue(new TextEncoder().encode(next));
        },
      }),
    );
  });
}

describe("rateLimit() with algorithm = concurrency", () => {
  for (const mode of ["redis", "local"] as const) {
    it(`${mode}: holds the slot while the handler runs and its body is read, frees it once the body is read`, async () => {
      const g = gate();
      const { app } = appWith({ on_store_error: "local" }, g);
      if (mode === "local") db.stack.bridge.setMode("refuse");
      const bg = background();
      const first = app.request("/tool", KEY, {}, bg.ctx);
      await g.reached();
      expect((await app.request("/tool", KEY)).status).toBe(429);
      g.open();
      const res = await first;
      expect(res.status).toBe(200);
      expect(res.headers.get("Sluice-Decision")).toBe(mode === "local" ? "degraded" : "allow");
      expect(res.headers.get("RateLimit-Policy")).toBe('"one";q=1;w=30');
      expect(res.headers.get("RateLimit")).toBe('"one";r=0;t=30');
      // headers delivered, body not yet read: the slot is still held
      expect((await app.request("/tool", KEY)).status).toBe(429);
      expect(await res.text()).toBe("ab");
      await bg.settled();
      const next = app.request("/tool", KEY, {}, bg.ctx);
      expect((await next).status).toBe(200);
      expect(await (await next).text()).toBe("ab");
    });
  }

  it("a client that cancels the body frees the slot", async () => {
    const { app } = appWith();
    const bg = background();
    const res = await app.request("/tool", KEY, {}, bg.ctx);
    const reader = res.body?.getReader();
    await reader?.read();
    expect((await app.request("/tool", KEY)).status).toBe(429);
    await reader?.cancel();
    await bg.settled();
    expect((await app.request("/tool", KEY)).status).toBe(200);
  });

  it("a handler that throws frees the slot at once", async () => {
    const { app } = countedApp(rateLimit(rig.options({ limits: ONE_AT_A_TIME })), () => {
      throw new Error("tool crashed");
    });
    const bg = background();
    expect((await app.request("/tool", KEY, {}, bg.ctx)).status).toBe(500);
    await bg.settled();
    expect((await app.request("/tool", KEY, {}, bg.ctx)).status).toBe(500);
  });

  it("a response without a body frees the slot at once", async () => {
    const { app } = countedApp(rateLimit(rig.options({ limits: ONE_AT_A_TIME })), (c) => c.body(null, 204));
    const bg = background();
    for (let i = 0; i < 3; i++) {
      expect((await app.request("/tool", KEY, {}, bg.ctx)).status).toBe(204);
      await bg.settled();
    }
  });
});
