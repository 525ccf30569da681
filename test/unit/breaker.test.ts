import { describe, expect, it } from "vitest";
import { CircuitBreaker } from "../../src/shed/breaker.js";

const settings = { window: 10_000, min_requests: 4, error_ratio: 0.5, cooldown: 1_000, probes: 2 };

describe("CircuitBreaker", () => {
  it("stays closed below min_requests or below the error ratio", () => {
    const b = new CircuitBreaker(settings);
    b.record(false, 10, 0, false);
    b.record(false, 10, 1, false);
    b.record(false, 10, 2, false); // three failures, but fewer than min_requests
    expect(b.state).toBe("closed");
    const c = new CircuitBreaker(settings);
    for (const ok of [true, true, true, false]) c.record(ok, 10, 0, false); // 25% < 50%
    expect(c.state).toBe("closed");
  });

  it("forgets outcomes older than the window", () => {
    const b = new CircuitBreaker(settings);
    b.record(false, 10, 0, false);
    b.record(false, 10, 1, false);
    for (let t = 20_000; t < 20_004; t++) b.record(t % 2 === 0, 10, t, false); // 2 of 4 fail in window: opens
    expect(b.state).toBe("open");
    const c = new CircuitBreaker(settings);
    c.record(false, 10, 0, false);
    c.record(false, 10, 1, false);
    for (let t = 20_000; t < 20_004; t++) c.record(true, 10, t, false); // old failures slid out
    expect(c.state).toBe("closed");
  });

  it("opens on median latency past latency_ms", () => {
    const b = new CircuitBreaker({ ...settings, latency_ms: 100 });
    for (const ms of [50, 150, 200, 300]) b.record(true, ms, 0, false);
    expect(b.state).toBe("open");
  });

  it("sheds while open, then lets `probes` through; all succeed: closed; one fails: open again", () => {
    const b = new CircuitBreaker(settings);
    for (let i = 0; i < 4; i++) b.record(false, 10, 0, false);
    expect(b.admit(500)).toEqual({ pass: false, retryAfterMs: 500 });
    expect(b.admit(1_000)).toEqual({ pass: true, probe: true });
    expect(b.admit(1_001)).toEqual({ pass: true, probe: true });
    expect(b.admit(1_002).pass).toBe(false); // no more than `probes` at once
    b.record(true, 10, 1_010, true);
    b.record(true, 10, 1_020, true);
    expect(b.state).toBe("closed");
    for (let i = 0; i < 4; i++) b.record(false, 10, 2_000, false);
    expect(b.admit(3_000)).toEqual({ pass: true, probe: true });
    b.record(false, 10, 3_010, true);
    expect(b.state).toBe("open");
    expect(b.admit(3_500).pass).toBe(false);
  });
});
