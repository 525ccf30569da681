import { describe, expect, it } from "vitest";
import { background, countedApp, from, gate, middlewareRig } from "../../../test/support/middleware-rig.js";
import { asHash } from "../../store/replies.js";
import { rateLimit } from "../../index.js";

/*
 * rateLimit({ adaptive }) in Node against a real Redis: each response of the handlers behind it
 * is a sample; the isolate reports them to lua/adaptive.lua (through waitUntil), and the limit the
 * script moves is the one the next decisions use: it falls while the handler is slower than the
 * target or failing, and climbs back once it is fast again.
 */
const rig = middlewareRig("adaptive");

/**
 * The latency target, and how slow a slow handler is: far apart, and far from what a loaded machine
 * adds to a fast (1 ms) handler's latency, so that slow and fast are the handler's, not the machine's.
 */
const TARGET_MS = 200;
const SLOW_MS = 3 * TARGET_MS;

/** An app with an adaptive limit whose handler takes `delay.ms` and answers `delay.status`. */
function appWith(delay: { ms: number; status: number }) {
  const options = rig.options({
    limits: [],
    adaptive: { target: `${TARGET_MS}ms`, interval: "100ms", initial: 8, min: 2, max: 12 },
  });
  const { app } = countedApp(rateLimit(options), async (c) => {
    await new Promise((r) => setTimeout(r, delay.ms));
    return c.text(
      c
        .get("sluice")
        .limits.map((l) => l.name)
        .join(","),
      delay.status as 200,
    );
  });
  const limit = async () => {
    const [key] = (await rig.db.redis.keys(`${options.key_prefix}:app:adaptive:state:*`)) as string[];
    return key ? Number(asHash(await rig.db.redis.hgetall(key)).limit) : NaN;
  };
  return { app, limit };
}

/**
 * `rounds` rounds of 8 requests at once, one from each of 8 clients (one client's share of the
 * samples is bounded); the statuses, once what they deferred has settled.
 */
async function rounds(app: ReturnType<typeof appWith>["app"], n: number): Promise<number[]> {
  const statuses: number[] = [];
  const bg = background();
  for (let i = 0; i < n; i++) {
    const batch = await Promise.all(
      Array.from({ length: 8 }, (_, k) => app.request("/work", from(`198.51.100.${k + 1}`), {}, bg.ctx)),
    );
    for (const r of batch) {
      statuses.push(r.status);
      await r.text();
    }
    await bg.settled();
  }
  return statuses;
}

describe("rateLimit() with adaptive", () => {
  it("falls below its initial 8 while the handler is slower than the target, and refuses past it; climbs back once fast", async () => {
    const delay = { ms: SLOW_MS, status: 200 };
    const { app, limit } = appWith(delay);
    await rounds(app, 6);
    const fallen = await limit();
    expect(fallen).toBeLessThan(8);
    const statuses = await rounds(app, 1);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(8 - Math.ceil(fallen));
    delay.ms = 1;
    // a step per window (100 ms) that saw the handler fast; the cap is far above it
    const until = Date.now() + 30_000;
    while (Date.now() < until && (await limit()) < 8) await rounds(app, 1);
    expect(await limit()).toBeGreaterThanOrEqual(8);
  });

  it("falls while the handler fails (5xx), however fast, down to min", async () => {
    const { app, limit } = appWith({ ms: 1, status: 503 });
    for (let i = 0; i < 30 && !((await limit()) <= 2); i++) await rounds(app, 1);
    expect(await limit()).toBe(2);
  });

  it("does not fall while the handler answers 429 (its own per-client limit): a 4xx is no overload", async () => {
    const { app, limit } = appWith({ ms: 1, status: 429 });
    await rounds(app, 10);
    // counted as failures, 80 of them took it to its min (2) within a few rounds
    expect(await limit()).not.toBeLessThan(8);
  });

  it("names the adaptive limit in c.get('sluice') and the RateLimit headers", async () => {
    const { app } = appWith({ ms: 1, status: 200 });
    const res = await app.request("/work", from("198.51.100.8"));
    expect(await res.text()).toBe("adaptive");
    expect(res.headers.get("RateLimit-Policy")).toMatch(/^"adaptive";q=8;w=35$/);
  });

  it("with a reserve, sheds the lowest priority first: default is refused where critical still passes", async () => {
    const g = gate();
    const options = rig.options({
      limits: [],
      priority: "header:x-priority" as const,
      adaptive: { target: "1s", initial: 4, reserve: { critical: 0.5 } },
    });
    const { app } = countedApp(rateLimit(options), async (c) => {
      await g.wait();
      return c.text("ok");
    });
    const as = (priority: string) => from("198.51.100.9", { "x-priority": priority });
    // two in flight of 4: 2 free, and default must leave the critical reserve (2) behind
    const held = [app.request("/work", as("default")), app.request("/work", as("default"))];
    await g.reached(2);
    const refused = await app.request("/work", as("default"));
    expect(refused.status).toBe(429);
    expect(await refused.json()).toMatchObject({ limit: "adaptive" });
    const critical = app.request("/work", as("critical"));
    await g.reached(3);
    g.open();
    expect((await critical).status).toBe(200);
    for (const r of await Promise.all(held)) expect(r.status).toBe(200);
  });
});
