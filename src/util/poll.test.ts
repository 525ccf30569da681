import { describe, expect, it } from "vitest";
import { retried } from "./poll.js";
import { keepRenewing } from "./renewal.js";

const failingTimes = (n: number) => {
  let calls = 0;
  return {
    work: async () => {
      if (++calls <= n) throw new Error(`failure ${calls}`);
      return calls;
    },
    calls: () => calls,
  };
};

describe("retried", () => {
  it("tries again after each failure until the work lands, telling each failure", async () => {
    const w = failingTimes(2);
    const told: string[] = [];
    expect(await retried(w.work, { startMs: 1, maxMs: 4, budgetMs: 100 }, (e) => told.push(String(e)))).toBe(3);
    expect(told).toEqual(["Error: failure 1", "Error: failure 2"]);
  });

  it("gives up once the next pause would pass the budget, with the last failure", async () => {
    const w = failingTimes(100);
    // pauses 1, 2, 4, 4 fit in 11 ms; the fifth (4) would not: five tries
    await expect(retried(w.work, { startMs: 1, maxMs: 4, budgetMs: 11 }, () => undefined)).rejects.toThrow("failure 5");
    expect(w.calls()).toBe(5);
  });
});

describe("keepRenewing", () => {
  it("renews every third of the lease until stopped, going on past failed renewals", async () => {
    let renewals = 0;
    const failures: unknown[] = [];
    const r = keepRenewing(
      async () => {
        if (++renewals === 2) throw new Error("lost one");
        return true;
      },
      300,
      (e) => failures.push(e),
    );
    for (let i = 0; i < 1_000 && renewals < 3; i++) await new Promise((done) => setTimeout(done, 10));
    r.stop();
    await r.done;
    expect(renewals).toBeGreaterThanOrEqual(3);
    expect(failures).toHaveLength(1);
  });

  it("stops by itself when the lease is no longer the holder's", async () => {
    let renewals = 0;
    const r = keepRenewing(
      async () => (++renewals, false),
      300,
      () => undefined,
    );
    await r.done;
    expect(renewals).toBe(1);
  });
});
