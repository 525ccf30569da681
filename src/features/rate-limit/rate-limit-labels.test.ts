/**
 * Readable labels of refused clients (docs/operating.md, Labels of refused clients), end to end in one process: a
 * refusal by rateLimit() keeps a label next to the hashed id, in a hash value of the metrics and
 * never in a key name; `labels = "off"` keeps none; the dashboard's figures show the label and
 * the deny entry a ban from its row would write, and the region the decisions were made in.
 */
import { describe, expect, it } from "vitest";
import { background, countedApp, from, middlewareRig } from "../../../test/support/middleware-rig.js";
import { dashboardData } from "../../admin/dashboard.js";
import type { Scope } from "../../context.js";
import { rateLimit, type RateLimitOptions } from "../../index.js";

const rig = middlewareRig("lbl");
const { db } = rig;

const HOSTILE_IP = "203.0.113.9";
const HOSTILE_KEY = "sk_live_0123456789abcdef:lists:*{x}`";

/**
 * Refuses `client` twice under `limits` and flushes the metrics at once (the isolate would within
 * five seconds); returns the scope the admitted request ran with (its config and stores) and
 * every key now under the test's prefix.
 */
async function refuse(opts: RateLimitOptions, client: RequestInit): Promise<{ scope: Scope; keys: string[] }> {
  let scope: Scope | undefined;
  const { app } = countedApp(rateLimit(opts), (c) => {
    scope = c.get("sluiceScope");
    return c.text("ok");
  });
  const bg = background();
  expect((await app.request("/x", client, {}, bg.ctx)).status).toBe(200);
  for (let i = 0; i < 2; i++) expect((await app.request("/x", client, {}, bg.ctx)).status).toBe(429);
  if (!scope) throw new Error("the admitted request never reached the handler");
  await opts.runtime!.metrics.flush(scope.config, scope.stores, bg.ctx.waitUntil.bind(bg.ctx), true);
  await bg.settled();
  return { scope, keys: await db.redis.keys(`${opts.key_prefix}:*`) };
}

const perIp = { name: "per-ip", rate: 1, period: "1h", lease: false } as const;
const perKey = { name: "per-key", key: "header:x-api-key", rate: 1, period: "1h", lease: false } as const;

describe("labels of refused clients", () => {
  it("never puts a label or the raw value in a Redis key name, and keeps labels as long as the counts", async () => {
    const both = { name: "per-ip-key", key: ["ip", "header:x-api-key"], rate: 1, period: "1h", lease: false } as const;
    for (const labels of ["full", "masked"] as const)
      for (const limit of [perIp, perKey, both]) {
        const opts = rig.options({ limits: [limit], labels });
        const { keys } = await refuse(opts, from(HOSTILE_IP, { "x-api-key": HOSTILE_KEY }));
        for (const key of keys) {
          for (const raw of [HOSTILE_IP, "203.0.113.0", HOSTILE_KEY, "sk_l", "{x}", "…"])
            expect(key).not.toContain(raw);
          // configured names, a minute number or a 32-hex hash between colons: nothing a client chose
          expect(key).toMatch(/^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)+$/);
        }
        const labelsKey = keys.find((k) => k.includes(":metrics:labels:"));
        const blockedKey = keys.find((k) => k.includes(":metrics:blocked:"));
        expect(labelsKey, `${labels} ${limit.name}`).toBeDefined();
        expect(await db.redis.ttl(labelsKey!)).toBe(await db.redis.ttl(blockedKey!));
        // the label is a hash value; the whole API key is kept nowhere, not even as a deny entry
        const stored = Object.values((await db.redis.hgetall(labelsKey!)) ?? {}).map(String);
        expect(stored.length).toBeGreaterThan(0);
        expect(stored.some((v) => v.includes("sk_live_0123"))).toBe(false);
      }
  });

  it("shows the label and the deny entry in the dashboard's figures: full IP, or its /24 when masked", async () => {
    const cases = [
      { labels: "full", label: HOSTILE_IP, entry: HOSTILE_IP },
      { labels: "masked", label: "203.0.113.0/24", entry: "203.0.113.0/24" },
    ] as const;
    for (const c of cases) {
      const opts = rig.options({ limits: [perIp], labels: c.labels });
      const { scope } = await refuse(opts, from(HOSTILE_IP));
      const data = await dashboardData(scope.config, scope.stores);
      expect(data.top_blocked).toEqual([
        { route: "app", id: expect.stringMatching(/^[0-9a-f]{32}$/), refusals: 2, label: c.label, entry: c.entry },
      ]);
      const route = data.routes.find((r) => r.route === "app");
      expect(route?.limits).toEqual([
        { limit: "-", allowed: 1, shed: 0 },
        { limit: "per-ip", allowed: 0, shed: 2 },
      ]);
      expect(route?.bans).toBe(0);
      const [home] = data.regions;
      expect(home?.region).toBe("home");
      expect(home!.per_second.allow! + home!.per_second.reject!).toBeGreaterThan(0);
      // the first decision went to Redis: the round trip's histogram has it
      expect(home?.rtt_p50_ms).toBeGreaterThan(0);
      expect(home?.degraded_seconds).toBe(0);
    }
  });

  it("shows only the ends of an API key, and offers no entry that would keep it whole", async () => {
    const opts = rig.options({ limits: [perKey] });
    const { scope } = await refuse(opts, from(HOSTILE_IP, { "x-api-key": HOSTILE_KEY }));
    const data = await dashboardData(scope.config, scope.stores);
    expect(data.top_blocked).toEqual([
      { route: "app", id: expect.stringMatching(/^[0-9a-f]{32}$/), refusals: 2, label: "sk_l…{x}`" },
    ]);
  });

  it('stores no label under labels = "off", and the figures show the hash alone', async () => {
    const opts = rig.options({ limits: [perIp, perKey], labels: "off" as const });
    const { scope, keys } = await refuse(opts, from(HOSTILE_IP, { "x-api-key": HOSTILE_KEY }));
    expect(keys.filter((k) => k.includes(":metrics:labels:"))).toEqual([]);
    expect(keys.some((k) => k.includes(":metrics:blocked:"))).toBe(true);
    const data = await dashboardData(scope.config, scope.stores);
    expect(data.top_blocked).toHaveLength(1);
    expect(data.top_blocked[0]).not.toHaveProperty("label");
    expect(data.top_blocked[0]).not.toHaveProperty("entry");
  });
});

describe("the dashboard's adaptive figures", () => {
  it("shows each region's adaptive limit and the latency it follows, from the region's Redis", async () => {
    const opts = rig.options({ limits: [], adaptive: { initial: 5, interval: "100ms" } });
    let scope: Scope | undefined;
    const { app } = countedApp(rateLimit(opts), (c) => {
      scope = c.get("sluiceScope");
      return c.text("ok");
    });
    const bg = background();
    // each response read to its end, so its in-flight slot is freed
    const call = async () => {
      const res = await app.request("/x", from("198.51.100.5"), {}, bg.ctx);
      expect(res.status).toBe(200);
      await res.text();
      await bg.settled();
    };
    for (let i = 0; i < 12; i++) await call();
    // a report goes to adaptive.lua once it is half an interval old
    await new Promise((r) => setTimeout(r, 80));
    await call();
    await bg.settled();
    const data = await dashboardData(scope!.config, scope!.stores);
    const [home, ...others] = data.routes[0]?.adaptive ?? [];
    expect(others).toEqual([]);
    // the window may have closed by now (its histogram starts anew: no latency yet) or not
    expect(home).toMatchObject({ region: "home", limit: 5 });
    expect(home?.latency_ms === null || home!.latency_ms >= 1).toBe(true);
    expect(home?.base_ms).toBeGreaterThanOrEqual(0);
  });
});
