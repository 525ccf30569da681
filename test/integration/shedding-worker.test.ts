import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, startWorker, type DemoOrigin, type RedisStack, sleep, useStack } from "./stack.js";

const once = [{ name: "once", key: "path", rate: 1, period: "1h" }];
const SLUICE: SluiceInput = {
  key_prefix: "s",
  timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
  routes: [
    { name: "shop", match: "/shop/*", on_limit: "fallback", limits: once },
    { name: "brief", match: "/brief/*", on_limit: "fallback", fallback_ttl: "1s", limits: once },
    {
      name: "sale",
      match: "/sale/*",
      on_limit: "fallback",
      fallback: { status: 200, content_type: "text/html", body: "<h1>Sold out</h1>" },
      limits: once,
    },
    {
      name: "sms",
      match: "/sms",
      methods: ["POST"],
      on_limit: "queue",
      queue: { max_body: 64, headers: ["content-type", "x-campaign"], max_retries: 2 },
      limits: [{ name: "provider", key: "global", rate: 10, period: "1s", burst: 5 }],
    },
    {
      name: "flaky",
      match: "/flaky",
      on_limit: "queue",
      queue: { max_retries: 2 },
      limits: [{ name: "one", key: "global", rate: 5, period: "1s", burst: 1 }],
    },
    {
      name: "fragile",
      match: "/fragile",
      breaker: { window: "10s", min_requests: 4, error_ratio: 0.5, cooldown: "1s", probes: 2 },
    },
    {
      name: "shielded",
      match: "/shielded",
      fallback: { status: 200, content_type: "text/plain", body: "back soon" },
      breaker: { min_requests: 2, cooldown: "5s" },
    },
    { name: "shared", match: "/shared", breaker: { min_requests: 2, cooldown: "5s", shared: true } },
    { name: "slow", match: "/slow", origin_timeout: "200ms" },
  ],
};

const rig = useStack({ sluice: SLUICE, queues: true });
let stack: RedisStack;
let origin: DemoOrigin;
let mf: Miniflare;
beforeAll(() => {
  ({ stack, origin, mf } = rig);
});

const hits = (path: string) => origin.seen.filter((s) => s.path === path).length;

/** The copy is written after the response (waitUntil): ask until it is served, or give up. */
async function untilFallback(path: string, headers: Record<string, string> = {}) {
  for (let i = 0; i < 40; i++) {
    const r = await call(mf, path, { headers });
    if (r.headers.get("sluice-decision") === "fallback") return r;
    await sleep(50);
  }
  return call(mf, path, { headers });
}

describe("on_limit = fallback", () => {
  it("serves the last good copy when shed, with Age and the RateLimit headers", async () => {
    const first = await call(mf, "/shop/item?b=2&a=1");
    expect(first.headers.get("sluice-decision")).toBe("allow");
    const copy = await untilFallback("/shop/item?a=1&b=2"); // same query, other order: same copy
    expect(copy.status).toBe(200);
    expect(copy.text).toBe(first.text);
    expect(copy.headers.get("x-origin")).toBe("demo");
    expect(Number(copy.headers.get("age"))).toBeGreaterThanOrEqual(0);
    expect(copy.headers.get("ratelimit")).toMatch(/^"once";r=0;/);
    expect(hits("/shop/item")).toBe(1);
  });

  it.each([
    ["no-store", "?cache-control=no-store"],
    ["private", "?cache-control=private,%20max-age=60"],
    ["Set-Cookie", "?set-cookie=session%3Dabc"],
  ])("never keeps a %s response", async (_, query) => {
    const path = `/shop/never-${_.toLowerCase()}`;
    expect((await call(mf, path + query)).status).toBe(200);
    await sleep(200);
    const shed = await call(mf, path + query);
    expect(shed.status).toBe(429);
    expect(shed.headers.get("sluice-decision")).toBe("reject");
  });

  it("respects Vary: a copy is served only to requests with the same varying headers", async () => {
    const path = "/shop/varied?vary=accept-language";
    expect((await call(mf, path, { headers: { "accept-language": "fr" } })).json().varied).toBe("fr");
    const fr = await untilFallback(path, { "accept-language": "fr" });
    expect(fr.headers.get("sluice-decision")).toBe("fallback");
    expect(fr.json().varied).toBe("fr");
    const de = await call(mf, path, { headers: { "accept-language": "de" } });
    expect(de.status).toBe(429);
  });

  it("falls back to the route's static page when there is no copy", async () => {
    expect((await call(mf, "/sale/tickets?cache-control=no-store")).status).toBe(200);
    const shed = await call(mf, "/sale/tickets?cache-control=no-store");
    expect(shed.status).toBe(200);
    expect(shed.text).toBe("<h1>Sold out</h1>");
    expect(shed.headers.get("content-type")).toBe("text/html");
    expect(shed.headers.get("sluice-decision")).toBe("fallback");
  });

  it("lets a copy expire after fallback_ttl", async () => {
    expect((await call(mf, "/brief/news")).status).toBe(200);
    expect((await untilFallback("/brief/news")).headers.get("sluice-decision")).toBe("fallback");
    await sleep(2_100);
    expect((await call(mf, "/brief/news")).status).toBe(429);
  });
});

describe("on_limit = queue", () => {
  it("queues what the limit sheds and delivers every job exactly once, never faster than the limit", async () => {
    const sent = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        call(mf, "/sms", {
          method: "POST",
          body: `msg-${i}`,
          headers: { "content-type": "text/plain", "x-campaign": "promo", "x-secret": "drop" },
        }),
      ),
    );
    const direct = sent.filter((r) => r.status === 200);
    const queued = sent.filter((r) => r.status === 202);
    expect(direct.length + queued.length).toBe(40);
    expect(direct.length).toBeGreaterThanOrEqual(5);
    for (const q of queued) {
      expect(q.headers.get("sluice-decision")).toBe("queued");
      expect(q.headers.get("location")).toBe(`/__sluice-jobs/${q.json().job_id}`);
    }

    for (let i = 0; i < 200 && hits("/sms") < 40; i++) await sleep(100);
    const seen = origin.seen.filter((s) => s.path === "/sms");
    expect(seen).toHaveLength(40);
    expect(new Set(seen.map((s) => s.body)).size).toBe(40); // every message, none twice
    const jobIds = seen.map((s) => s.headers["sluice-job-id"]).filter(Boolean);
    expect(new Set(jobIds).size).toBe(queued.length);
    const delivered = seen.filter((s) => s.headers["sluice-job-id"]);
    expect(delivered.every((s) => s.headers["x-campaign"] === "promo" && s.headers["x-secret"] === undefined)).toBe(
      true,
    );

    // a token bucket of 10/s with burst 5 admits at most 5 + 10·w in any window of w seconds
    const times = seen.map((s) => s.at).sort((a, b) => a - b);
    for (let i = 0; i < times.length; i++) {
      const inSecond = times.filter((t) => t >= (times[i] as number) && t < (times[i] as number) + 1_000).length;
      expect(inSecond).toBeLessThanOrEqual(5 + 10 + 1); // +1: the origin's clock and Redis's differ by a hair
    }

    const perSecond = Math.max(...times.map((t) => times.filter((u) => u >= t && u < t + 1_000).length));
    const seconds = ((times.at(-1) as number) - (times[0] as number)) / 1000;
    console.log(
      `queue figures: ${sent.length} messages, ${direct.length} direct, ${queued.length} queued, ${seen.length} delivered, duplicates ${seen.length - new Set(seen.map((s) => s.body)).size}, most in any 1 s window ${perSecond} (limit 10/s, burst 5), ${(seen.length / seconds).toFixed(1)} msg/s over ${seconds.toFixed(1)} s`,
    );

    const status = await call(mf, queued[0]!.headers.get("location")!);
    expect(status.json()).toMatchObject({ status: "delivered", origin_status: 200, route: "sms" });
  });

  it("refuses to queue a body over max_body with a 413 problem", async () => {
    const results = await Promise.all(
      Array.from({ length: 8 }, () => call(mf, "/sms", { method: "POST", body: "x".repeat(100) })),
    );
    expect(results.some((r) => r.status === 413 && r.headers.get("content-type") === "application/problem+json")).toBe(
      true,
    );
  });

  it("retries a failing origin with backoff, then marks the job failed and dead-letters it", async () => {
    const [first, second] = await Promise.all([
      call(mf, "/flaky?status=500", { method: "POST", body: "a" }),
      call(mf, "/flaky?status=500", { method: "POST", body: "b" }),
    ]);
    const job = [first, second].find((r) => r.status === 202);
    expect(job).toBeDefined();
    const location = job!.headers.get("location")!;
    let status: Record<string, unknown> = {};
    for (let i = 0; i < 150 && status.dead_letter !== true; i++) {
      await sleep(100);
      status = (await call(mf, location)).json();
    }
    expect(status, JSON.stringify(status)).toMatchObject({
      status: "failed",
      origin_status: 500,
      failures: 3,
      dead_letter: true,
    });
    const jobId = job!.json().job_id;
    expect(origin.seen.filter((s) => s.headers["sluice-job-id"] === jobId)).toHaveLength(3); // 1 + max_retries
  });

  it("answers unknown or malformed job ids with 404", async () => {
    expect((await call(mf, "/__sluice-jobs/00000000-0000-4000-8000-000000000000")).status).toBe(404);
    expect((await call(mf, "/__sluice-jobs/not-a-job%3Cscript%3E")).status).toBe(404);
  });
});

describe("circuit breaker", () => {
  // one client's outcomes count at most max(1, ceil(min_requests × 0.25)) times: spread them over IPs
  const ip = (i: number) => `198.51.100.${i + 1}`;

  it("opens on a failing origin, sheds without touching it, and closes after successful probes", async () => {
    for (let i = 0; i < 4; i++) expect((await call(mf, "/fragile?status=500", { ip: ip(i) })).status).toBe(500);
    expect(hits("/fragile")).toBe(4);
    for (let i = 0; i < 3; i++) {
      const r = await call(mf, "/fragile");
      expect(r.status).toBe(503);
      expect(r.headers.get("retry-after")).toBe("1");
      expect(r.json()).toMatchObject({ title: "Origin unavailable" });
    }
    expect(hits("/fragile")).toBe(4); // the origin saw nothing while open
    await sleep(1_100);
    expect((await call(mf, "/fragile")).status).toBe(200); // probe 1
    expect((await call(mf, "/fragile")).status).toBe(200); // probe 2: closes
    for (let i = 0; i < 3; i++) expect((await call(mf, "/fragile")).status).toBe(200);
    expect(hits("/fragile")).toBe(9);
  });

  it("a failed probe opens it again", async () => {
    for (let i = 0; i < 4; i++) await call(mf, "/fragile?status=503", { ip: ip(i) });
    expect((await call(mf, "/fragile")).status).toBe(503);
    await sleep(1_100);
    const before = hits("/fragile");
    expect((await call(mf, "/fragile?status=500")).status).toBe(500); // probe fails
    expect((await call(mf, "/fragile")).json()).toMatchObject({ title: "Origin unavailable" });
    expect(hits("/fragile")).toBe(before + 1);
  });

  it("serves the route's fallback while open", async () => {
    await call(mf, "/shielded?status=502", { ip: ip(0) });
    await call(mf, "/shielded?status=502", { ip: ip(1) });
    const r = await call(mf, "/shielded");
    expect(r.text).toBe("back soon");
    expect(r.headers.get("sluice-decision")).toBe("fallback");
  });

  it("with shared = true, another isolate of the region opens within a second", async () => {
    const other = startWorker({ sluice: SLUICE, origin: origin.url, redisRestUrl: stack.bridge.url, queues: true });
    try {
      await call(mf, "/shared?status=500", { ip: ip(0) });
      await call(mf, "/shared?status=500", { ip: ip(1) });
      expect((await call(mf, "/shared")).status).toBe(503);
      const before = hits("/shared");
      await call(other, "/shared"); // its first request reads the shared state in the background
      let status = 0;
      for (let i = 0; i < 20 && status !== 503; i++) {
        await sleep(100);
        status = (await call(other, "/shared")).status;
      }
      expect(status).toBe(503);
      expect(hits("/shared")).toBeLessThanOrEqual(before + 2);
    } finally {
      await other.dispose();
    }
  });

  it("an origin slower than origin_timeout is a 504 problem", async () => {
    const r = await call(mf, "/slow?delay=1000");
    expect(r.status).toBe(504);
    expect(r.json()).toMatchObject({ title: "Gateway timeout" });
  });
});
