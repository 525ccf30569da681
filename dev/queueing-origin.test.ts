import { afterEach, describe, expect, it } from "vitest";
import { type QueueingOrigin, serviceOf, startQueueingOrigin } from "./queueing-origin.js";

interface Answer {
  status: number;
  ms: number;
  inFlight: number;
}

async function get(url: string): Promise<Answer> {
  const start = performance.now();
  const res = await fetch(url);
  const body = (await res.json()) as { in_flight: number };
  return { status: res.status, ms: performance.now() - start, inFlight: body.in_flight };
}

describe("serviceOf", () => {
  const model = { servers: 4, serviceMs: 100, knee: 16 };
  it("takes serviceMs up to `servers` in flight, then grows with n, and fails past the knee", () => {
    expect(serviceOf(model, 1)).toEqual({ ms: 100, status: 200 });
    expect(serviceOf(model, 4)).toEqual({ ms: 100, status: 200 });
    expect(serviceOf(model, 8)).toEqual({ ms: 200, status: 200 });
    expect(serviceOf(model, 16)).toEqual({ ms: 400, status: 200 });
    expect(serviceOf(model, 17)).toEqual({ ms: 400, status: 503 });
  });
});

describe("startQueueingOrigin", () => {
  let origin: QueueingOrigin | undefined;
  afterEach(async () => {
    await origin?.close();
    origin = undefined;
  });

  it("answers slower as more requests are in flight, and 503 past the knee", async () => {
    // long enough that all 8 are in flight together even when a loaded machine sends them slowly
    const serviceMs = 300;
    origin = await startQueueingOrigin({ servers: 2, serviceMs, knee: 6 });
    const url = origin.url;
    const alone = await get(url);
    expect(alone).toMatchObject({ status: 200, inFlight: 1 });
    expect(alone.ms).toBeGreaterThanOrEqual(serviceMs - 2);
    origin.reset();

    const pending = Array.from({ length: 8 }, () => get(url));
    for (let i = 0; i < 50 && origin.inFlight() < 8; i++) await new Promise((r) => setTimeout(r, 5));
    expect(origin.inFlight()).toBe(8);
    const answers = (await Promise.all(pending)).sort((a, b) => a.inFlight - b.inFlight);
    expect(answers.map((a) => a.inFlight)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200, 503, 503]);
    // the sixth waits 300 × 6 / 2 = 900 ms, the second 300 ms: latency grows with n
    const sixth = answers[5] as Answer;
    expect(sixth.ms).toBeGreaterThanOrEqual(3 * serviceMs - 2);
    expect(sixth.ms).toBeGreaterThan((answers[1] as Answer).ms);
    expect(origin.stats()).toEqual({ ok: 6, failed: 2, maxInFlight: 8 });
    expect(origin.inFlight()).toBe(0);
  });

  it("reset zeroes the stats and setModel applies to the next requests", async () => {
    origin = await startQueueingOrigin({ servers: 1, serviceMs: 5, knee: 1 });
    await get(origin.url);
    expect(origin.stats()).toEqual({ ok: 1, failed: 0, maxInFlight: 1 });
    origin.reset();
    expect(origin.stats()).toEqual({ ok: 0, failed: 0, maxInFlight: 0 });
    origin.setModel({ serviceMs: 40 });
    const url = origin.url;
    const two = await Promise.all([get(url), get(url)]);
    expect(two.map((a) => a.status).sort()).toEqual([200, 503]);
    for (const a of two) expect(a.ms).toBeGreaterThanOrEqual(38);
    expect(() => origin?.setModel({ servers: 0 })).toThrow(/servers/);
  });
});
