import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { STORE_CIRCUIT, StoreCircuit } from "./circuit.js";

describe("StoreCircuit", () => {
  it("stays closed through failures that are not consecutive", () => {
    const c = new StoreCircuit();
    for (let t = 0; t < 20; t++) {
      c.failed(t, false);
      c.failed(t, false);
      c.succeeded();
    }
    expect(c.state(20)).toBe("closed");
    expect(c.admit(20)).toBe("pass");
  });

  it("opens after three consecutive failures: calls are refused, with no request, until the open time is over", () => {
    const c = new StoreCircuit();
    c.failed(0, false);
    c.failed(1, false);
    expect(c.admit(2)).toBe("pass");
    c.failed(2, false);
    expect(c.state(2)).toBe("open");
    expect(c.openUntilMs).toBe(2 + STORE_CIRCUIT.openMs);
    for (let t = 3; t < 2 + STORE_CIRCUIT.openMs; t += 10) expect(c.admit(t)).toBe("refuse");
  });

  it("lets one probe through when the open time is over; its success closes the circuit", () => {
    const c = new StoreCircuit();
    for (let i = 0; i < 3; i++) c.failed(0, false);
    const t = STORE_CIRCUIT.openMs;
    expect(c.state(t)).toBe("half_open");
    expect(c.admit(t)).toBe("probe");
    expect(c.admit(t + 1)).toBe("refuse"); // one probe at a time
    c.succeeded();
    expect(c.state(t + 2)).toBe("closed");
    expect(c.admit(t + 2)).toBe("pass");
    // closed again from scratch: it takes three new failures to open it
    c.failed(t + 3, false);
    c.failed(t + 3, false);
    expect(c.admit(t + 3)).toBe("pass");
  });

  it("a failed probe opens it again for twice as long, never longer than maxOpenMs", () => {
    const c = new StoreCircuit();
    for (let i = 0; i < 3; i++) c.failed(0, false);
    let now = 0;
    const periods: number[] = [];
    for (let i = 0; i < 6; i++) {
      now = c.openUntilMs;
      expect(c.admit(now)).toBe("probe");
      c.failed(now, true);
      periods.push(c.openUntilMs - now);
    }
    expect(periods).toEqual([500, 750, 750, 750, 750, 750]);
  });

  it("failures of calls that were in flight when it opened do not stretch the open time", () => {
    const c = new StoreCircuit();
    for (let i = 0; i < 3; i++) c.failed(0, false);
    const until = c.openUntilMs;
    for (let i = 0; i < 10; i++) c.failed(100, false);
    expect(c.openUntilMs).toBe(until);
  });

  it("a lost probe (never reported) does not keep the store skipped for ever", () => {
    const c = new StoreCircuit();
    for (let i = 0; i < 3; i++) c.failed(0, false);
    const t = c.openUntilMs;
    expect(c.admit(t)).toBe("probe");
    expect(c.admit(t + STORE_CIRCUIT.probeLostMs - 1)).toBe("refuse");
    expect(c.admit(t + STORE_CIRCUIT.probeLostMs)).toBe("probe");
  });

  it("property: once open, a probe goes within maxOpenMs of the last failure, so a store that is back is used within a second", () => {
    const stepArb = fc.record({ dt: fc.integer({ min: 0, max: 2_000 }), ok: fc.boolean() });
    fc.assert(
      fc.property(fc.array(stepArb, { maxLength: 80 }), (steps) => {
        const c = new StoreCircuit();
        let now = 0;
        for (const { dt, ok } of steps) {
          now += dt;
          const admission = c.admit(now);
          if (admission === "refuse") continue;
          if (ok) c.succeeded();
          else c.failed(now, admission === "probe");
        }
        // whatever the history, no probe in flight: the next call at most maxOpenMs later goes
        return c.admit(now + STORE_CIRCUIT.maxOpenMs) !== "refuse";
      }),
    );
    expect(STORE_CIRCUIT.maxOpenMs).toBeLessThan(1_000);
  });
});
