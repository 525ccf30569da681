import { describe, expect, it } from "vitest";
import { background, countedApp, from, gate, middlewareRig } from "../../../test/support/middleware-rig.js";
import { rateLimit, type RateLimitOptions } from "../../index.js";

/*
 * rateLimit() with a limit charged what the origin reports (README, Cost from the response), in
 * Node against a real Redis: `reserve` is taken at admission and held while the request runs, the
 * charge is settled to the reported figure (at most `max`) after the response, a figure above what
 * was left puts the bucket in debt, refused with an honest Retry-After until the refill pays it
 * back, and a response that reports nothing keeps the reserve.
 */
const rig = middlewareRig("rcost");

// 1000 tokens a day (the refill is negligible while a test runs: 1 token every 86.4 s)
const DAY_S = 86_400;
const limitsOf = (reserve: number, burst = 1000, max = 5000): RateLimitOptions["limits"] => [
  {
    name: "tpd",
    key: "header:x-api-key",
    rate: 1000,
    period: "1d",
    burst,
    cost: { response: "header:x-usage-tokens", reserve, max },
  },
];
/** A request whose handler will report `usage` (none: no header), held at the gate when `hold`. */
const asking = (usage?: number, hold = false) =>
  from("198.51.100.40", {
    "x-api-key": "k",
    ...(usage === undefined ? {} : { "x-report": String(usage) }),
    ...(hold ? { "x-hold": "1" } : {}),
  });

/** An app whose handler waits at `g` (when given and the request says hold), then answers with the usage the request asked it to report. */
function appWith(limits: RateLimitOptions["limits"], g?: { wait: () => Promise<void> }) {
  return countedApp(rateLimit(rig.options({ limits })), async (c) => {
    if (c.req.header("x-hold")) await g?.wait();
    const usage = c.req.header("x-report");
    return c.text("done", 200, usage === undefined ? {} : { "x-usage-tokens": usage });
  });
}

const remainingOf = (res: Response) => Number(/;r=(\d+)/.exec(res.headers.get("RateLimit") ?? "")?.[1]);

describe("rateLimit() with cost = { response = ... }", () => {
  it("holds the reserve while the request runs and settles to the reported figure after", async () => {
    const g = gate();
    const { app } = appWith(limitsOf(400), g);
    const bg = background();
    const first = app.request("/", asking(50, true), {}, bg.ctx);
    await g.reached();
    // the first request holds 400 while it runs: this one leaves 1000 - 400 - 400
    const second = await app.request("/", asking(100), {}, bg.ctx);
    expect(remainingOf(second)).toBe(200);
    g.open();
    expect((await first).status).toBe(200);
    await bg.settled();
    // settled: 1000 - 50 - 100 = 850 before this one takes its 400 reserve
    const third = await app.request("/", asking(400), {}, bg.ctx);
    expect(third.status).toBe(200);
    expect(remainingOf(third)).toBe(450);
  });

  it("goes into debt past what was left (at most max), refused with an honest Retry-After", async () => {
    const { app } = appWith(limitsOf(100, 1000, 1500));
    const bg = background();
    // reports 9999, charged max = 1500: 1000 - 1500 = -500
    expect((await app.request("/", asking(9999), {}, bg.ctx)).status).toBe(200);
    await bg.settled();
    const refused = await app.request("/", asking(1), {}, bg.ctx);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("RateLimit")).toMatch(/;r=0;/);
    // until the bucket holds the reserve again: 600 tokens at 1 per 86.4 s
    const wait = Number(refused.headers.get("Retry-After"));
    expect(wait).toBeGreaterThanOrEqual(600 * (DAY_S / 1000) - 2);
    expect(wait).toBeLessThanOrEqual(600 * (DAY_S / 1000));
  });

  it("keeps the reserve of a response that reports nothing", async () => {
    const { app } = appWith(limitsOf(100));
    const bg = background();
    expect((await app.request("/", asking(), {}, bg.ctx)).status).toBe(200);
    await bg.settled();
    expect(remainingOf(await app.request("/", asking(100), {}, bg.ctx))).toBe(800);
  });

  it("never spends more than the capacity plus (figure - reserve) per request in flight, paid back as debt", async () => {
    // capacity 300, reserve 100: 3 of 6 concurrent requests are admitted, each then reports 250
    const g = gate();
    const { app, calls } = appWith(limitsOf(100, 300), g);
    const bg = background();
    const all = Array.from({ length: 6 }, () => app.request("/", asking(250, true), {}, bg.ctx));
    await g.reached(3);
    g.open();
    const statuses = (await Promise.all(all)).map((r) => r.status);
    await bg.settled();
    expect(statuses.filter((s) => s === 200)).toHaveLength(3);
    expect(calls.n).toBe(3);
    // spent 3 × 250 = 750 = 300 + 3 × (250 - 100): a debt of 450, refused until 550 tokens refill
    const refused = await app.request("/", asking(1), {}, bg.ctx);
    expect(refused.status).toBe(429);
    const wait = Number(refused.headers.get("Retry-After"));
    expect(wait).toBeGreaterThanOrEqual(550 * (DAY_S / 1000) - 2);
    expect(wait).toBeLessThanOrEqual(550 * (DAY_S / 1000));
  });

  it("refuses a cost from the response on an algorithm other than token_bucket, naming the field", () => {
    expect(() =>
      rateLimit(
        rig.options({
          limits: [{ ...limitsOf(100)[0]!, algorithm: "fixed_window", burst: 1000, period: "1m" }],
        }),
      ),
    ).toThrow(/limits\[0\]\.cost.*token_bucket/);
    expect(() => rateLimit(rig.options({ limits: [{ ...limitsOf(100)[0]!, lease: true }] }))).toThrow(
      /limits\[0\]\.lease/,
    );
  });
});
