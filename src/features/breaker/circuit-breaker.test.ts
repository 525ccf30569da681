import { describe, expect, it } from "vitest";
import { CircuitBreaker, clientCap } from "./circuit-breaker.js";

// client_share 0.25 of min_requests 4: one event per client counts
const settings = { window: 10_000, min_requests: 4, error_ratio: 0.5, cooldown: 1_000, probes: 2, client_share: 0.25 };
/** The i-th of several clients: the breaker counts each one's outcomes at most up to its cap. */
const ip = (i: number) => `198.51.100.${i}`;

describe("CircuitBreaker", () => {
  it("stays closed below min_requests or below the error ratio", () => {
    const b = new CircuitBreaker(settings);
    b.record(ip(1), false, 10, 0, false);
    b.record(ip(2), false, 10, 1, false);
    b.record(ip(3), false, 10, 2, false); // three failures, but fewer than min_requests
    expect(b.state).toBe("closed");
    const c = new CircuitBreaker(settings);
    [true, true, true, false].forEach((ok, i) => c.record(ip(i), ok, 10, 0, false)); // 25% < 50%
    expect(c.state).toBe("closed");
  });

  it("forgets outcomes older than the window", () => {
    const b = new CircuitBreaker(settings);
    b.record(ip(1), false, 10, 0, false);
    b.record(ip(2), false, 10, 1, false);
    for (let t = 20_000; t < 20_004; t++) b.record(ip(t), t % 2 === 0, 10, t, false); // 2 of 4 fail in window: opens
    expect(b.state).toBe("open");
    const c = new CircuitBreaker(settings);
    c.record(ip(1), false, 10, 0, false);
    c.record(ip(2), false, 10, 1, false);
    for (let t = 20_000; t < 20_004; t++) c.record(ip(t), true, 10, t, false); // old failures slid out
    expect(c.state).toBe("closed");
  });

  it("opens on median latency past latency_ms", () => {
    const b = new CircuitBreaker({ ...settings, latency_ms: 100 });
    [50, 150, 200, 300].forEach((ms, i) => b.record(ip(i), true, ms, 0, false));
    expect(b.state).toBe("open");
  });

  it("sheds while open, then lets `probes` through; all succeed: closed; one fails: open again", () => {
    const b = new CircuitBreaker(settings);
    for (let i = 0; i < 4; i++) b.record(ip(i), false, 10, 0, false);
    expect(b.admit(500)).toEqual({ pass: false, retryAfterMs: 500 });
    expect(b.admit(1_000)).toEqual({ pass: true, probe: true });
    expect(b.admit(1_001)).toEqual({ pass: true, probe: true });
    expect(b.admit(1_002).pass).toBe(false); // no more than `probes` at once
    b.record(ip(1), true, 10, 1_010, true);
    b.record(ip(1), true, 10, 1_020, true); // probes are not capped per client
    expect(b.state).toBe("closed");
    for (let i = 0; i < 4; i++) b.record(ip(i), false, 10, 2_000, false);
    expect(b.admit(3_000)).toEqual({ pass: true, probe: true });
    b.record(ip(1), false, 10, 3_010, true);
    expect(b.state).toBe("open");
    expect(b.admit(3_500).pass).toBe(false);
  });

  it("a probe that never reached the origin (refused by the limits) gives its place back, so half-open still closes", () => {
    const b = new CircuitBreaker(settings);
    for (let i = 0; i < 4; i++) b.record(ip(i), false, 10, 0, false);
    expect(b.admit(1_000)).toEqual({ pass: true, probe: true });
    expect(b.admit(1_001)).toEqual({ pass: true, probe: true });
    b.probeUnused(); // the second probe was answered with a 429: the origin never saw it
    expect(b.admit(1_002)).toEqual({ pass: true, probe: true });
    b.record(ip(1), true, 10, 1_010, true);
    b.record(ip(2), true, 10, 1_020, true);
    expect(b.state).toBe("closed");
  });
});

describe("CircuitBreaker: one client cannot open (or hold closed) the breaker for everybody", () => {
  const twenty = { ...settings, min_requests: 20 }; // the defaults: cap 5, so four clients are needed

  it("caps a client at max(1, ceil(min_requests × client_share)); client_share = 1 is no cap", () => {
    expect(clientCap({ min_requests: 20, client_share: 0.25 })).toBe(5);
    expect(clientCap({ min_requests: 4, client_share: 0.25 })).toBe(1);
    expect(clientCap({ min_requests: 10, client_share: 0.33 })).toBe(4);
    expect(clientCap({ min_requests: 1, client_share: 0.1 })).toBe(1);
    expect(clientCap({ min_requests: 20, client_share: 1 })).toBe(Number.POSITIVE_INFINITY);
  });

  it("50 failures from one client never open it; failures from four clients do", () => {
    const b = new CircuitBreaker(twenty);
    for (let i = 0; i < 50; i++) b.record(ip(1), false, 10, i, false);
    expect(b.state).toBe("closed");
    for (const client of [2, 3]) for (let i = 0; i < 5; i++) b.record(ip(client), false, 10, 100 + i, false);
    expect(b.state).toBe("closed"); // 15 counted failures, still short of min_requests
    for (let i = 0; i < 4; i++) b.record(ip(4), false, 10, 200 + i, false);
    expect(b.state).toBe("closed"); // 19
    b.record(ip(4), false, 10, 204, false);
    expect(b.state).toBe("open"); // 20 counted failures, from four clients
  });

  it("one client's flood of successes does not dilute the others' failures", () => {
    const b = new CircuitBreaker(settings);
    for (let i = 0; i < 100; i++) b.record(ip(0), true, 10, i, false);
    for (const client of [1, 2, 3]) b.record(ip(client), false, 10, 200, false);
    expect(b.state).toBe("open"); // 3 failures of 4 counted events, not 3 of 103
  });

  it("only a client's most recent events count", () => {
    const b = new CircuitBreaker({ ...settings, client_share: 0.5 }); // cap 2
    for (const ok of [false, false, true, true]) b.record(ip(1), ok, 10, 0, false);
    b.record(ip(2), true, 10, 1, false);
    b.record(ip(2), true, 10, 2, false);
    expect(b.state).toBe("closed"); // counted: ip1's two successes and ip2's two, not ip1's failures
    b.record(ip(1), false, 10, 3, false);
    b.record(ip(1), false, 10, 4, false);
    expect(b.state).toBe("open"); // ip1's latest two failed: 2 of 4
  });

  it("one slow client does not move the median latency", () => {
    const b = new CircuitBreaker({ ...settings, latency_ms: 100 });
    for (let i = 0; i < 50; i++) b.record(ip(0), true, 5_000, i, false);
    for (const client of [1, 2, 3]) b.record(ip(client), true, 10, 100, false);
    expect(b.state).toBe("closed");
  });

  it("client_share = 1 turns the cap off: one client's 20 failures open it", () => {
    const capped = new CircuitBreaker(twenty);
    const uncapped = new CircuitBreaker({ ...twenty, client_share: 1 });
    for (let i = 0; i < 20; i++) for (const b of [capped, uncapped]) b.record(ip(1), false, 10, i, false);
    expect([capped.state, uncapped.state]).toEqual(["closed", "open"]);
  });
});
