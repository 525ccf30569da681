import { afterEach, describe, expect, it, vi } from "vitest";
import { loadConfig, type Route } from "../../config/index.js";
import type { Store } from "../../store/redis.js";
import { StoreVersions } from "../../store/versions.js";
import { Breakers, type BreakerShare } from "./breakers.js";

function sharedRoute(): Route {
  const r = loadConfig({
    ORIGIN_URL: "https://o.example",
    SLUICE: { routes: [{ name: "shared", match: "/s", breaker: { min_requests: 2, shared: true } }] },
  });
  if (!r.ok) throw r.error;
  return r.config.routes[0] as Route;
}

/** A region store whose breaker key reads as `until`, counting the reads. */
function fakeShare(until: () => number) {
  const reads = { n: 0 };
  const store = {
    id: "eu",
    keys: {
      get: async () => {
        reads.n++;
        return String(until());
      },
    },
  } as unknown as Store;
  const deferred: Array<Promise<unknown>> = [];
  const share: BreakerShare = { store, key: "p:shared:breaker", defer: (p) => void deferred.push(p) };
  return { share, reads, settle: () => Promise.all(deferred) };
}

afterEach(() => vi.useRealTimers());

describe("a shared breaker's state, read back by the other isolates", () => {
  it("is read once a second while no decision has reported the change counter, then only when it moves", async () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const versions = new StoreVersions();
    const breakers = new Breakers(versions);
    const route = sharedRoute();
    let openUntil = 0;
    const { share, reads, settle } = fakeShare(() => openUntil);
    breakers.of(route, share);
    breakers.of(route, share);
    await settle();
    expect(reads.n).toBe(1);
    vi.advanceTimersByTime(1_000);
    breakers.of(route, share);
    await settle();
    expect(reads.n).toBe(2); // no counter known yet: the one-second poll
    versions.observe("eu", 4);
    vi.advanceTimersByTime(1_000);
    breakers.of(route, share);
    await settle();
    expect(reads.n).toBe(3); // read at version 4
    for (let i = 0; i < 10; i++) {
      vi.advanceTimersByTime(5_000);
      versions.observe("eu", 4);
      expect(breakers.of(route, share)?.state).toBe("closed");
    }
    await settle();
    expect(reads.n).toBe(3); // nothing moved: nothing read
    openUntil = Date.now() + 60_000; // another isolate opened it, bumping the counter
    versions.observe("eu", 5);
    breakers.of(route, share);
    await settle();
    expect(reads.n).toBe(4);
    expect(breakers.of(route, share)?.state).toBe("open");
  });
});
