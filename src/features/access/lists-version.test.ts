import { afterEach, describe, expect, it, vi } from "vitest";
import type { RequestFacts } from "../../identity/identify.js";
import type { Store } from "../../store/redis.js";
import { StoreVersions } from "../../store/versions.js";
import { LISTS_FALLBACK_MS, LISTS_MAX_AGE_MS, ListCache } from "./lists.js";

/**
 * A home store whose lists hash and change counter are whatever the test sets, answering the
 * lists' one read (lua/access-lists.lua `read`: the counter, then the live values) and counting them.
 */
function fakeHome() {
  const state = { version: 1, entries: [] as string[], reads: 0 };
  const store = {
    id: "home",
    script: (source: string) => source,
    run: async () => {
      state.reads++;
      const values = state.entries.map((e) => JSON.stringify({ kind: "deny", entry: e, until: 9e15 }));
      return [String(state.version), ...values];
    },
  } as unknown as Store;
  return { store, state };
}

const facts = (ip: string) => ({ ip }) as RequestFacts;

afterEach(() => vi.useRealTimers());

describe("the isolate's copy of the lists", () => {
  it("is read once, then again only when a decision reports that the change counter moved", async () => {
    const versions = new StoreVersions();
    const lists = new ListCache(versions);
    const { store, state } = fakeHome();
    const source = { prefix: "p", store };
    const deferred: Array<Promise<unknown>> = [];
    const defer = (p: Promise<unknown>) => void deferred.push(p);
    const verdict = (ip: string) => lists.verdict(source, facts(ip), "api", defer);

    expect(await verdict("198.51.100.1")).toBeUndefined(); // the first request waits for the first read
    expect(state.reads).toBe(1);
    state.entries = ["198.51.100.1"]; // written, but the counter has not been reported as moved
    state.version = 2;
    for (let i = 0; i < 5; i++) {
      versions.observe("home", 1);
      expect(await verdict("198.51.100.1")).toBeUndefined();
    }
    expect(state.reads).toBe(1); // nothing while nothing (that a decision saw) changed
    versions.observe("home", 2); // a decision's reply
    expect(await verdict("198.51.100.1")).toBeUndefined(); // the read is deferred: this request still has the old lists
    await Promise.all(deferred);
    expect(state.reads).toBe(2);
    expect(await verdict("198.51.100.1")).toBe("deny");
    versions.observe("home", 2);
    await verdict("198.51.100.2");
    await Promise.all(deferred);
    expect(state.reads).toBe(2);
  });

  it("catches a write made between its first read and the first decision that reported the counter", async () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const versions = new StoreVersions();
    const lists = new ListCache(versions);
    const { store, state } = fakeHome();
    const deferred: Array<Promise<unknown>> = [];
    const source = { prefix: "p", store };
    await lists.verdict(source, facts("198.51.100.3"), "api", (p) => void deferred.push(p));
    state.entries = ["198.51.100.3"];
    state.version = 2;
    versions.observe("home", 2); // the first sight of the counter: not a change, but later than the read's
    await lists.verdict(source, facts("198.51.100.3"), "api", (p) => void deferred.push(p));
    await Promise.all(deferred);
    expect(await lists.verdict(source, facts("198.51.100.3"), "api", () => undefined)).toBe("deny");
  });

  it(`reads again once ${LISTS_FALLBACK_MS / 1000} s old when the previous request decided nothing, and every ${LISTS_MAX_AGE_MS / 60_000} min whatever`, async () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const versions = new StoreVersions();
    const lists = new ListCache(versions);
    const { store, state } = fakeHome();
    const source = { prefix: "p", store };
    const deferred: Array<Promise<unknown>> = [];
    /** One request: its lists check, then (when it decides) its decision's report of the counter. */
    const request = async (decides: boolean) => {
      await lists.verdict(source, facts("198.51.100.4"), "api", (p) => void deferred.push(p));
      vi.advanceTimersByTime(5);
      if (decides) versions.observe("home", state.version);
      await Promise.all(deferred);
    };
    await request(false);
    vi.advanceTimersByTime(LISTS_FALLBACK_MS);
    await request(false); // an isolate whose requests do not decide (an unmatched path, say)
    expect(state.reads).toBe(2);
    // requests that decide keep the lists current through the counter: no read however old they get
    for (let i = 0; i < 20; i++) {
      await request(true);
      vi.advanceTimersByTime(LISTS_FALLBACK_MS);
    }
    expect(state.reads).toBe(2);
    // ... up to the longest bound
    vi.advanceTimersByTime(LISTS_MAX_AGE_MS);
    await request(true);
    expect(state.reads).toBe(3);
  });
});

describe("a write of this isolate's own (the admin API)", () => {
  it("is read back at once: the writer's next request meets it, with no decision reporting the counter", async () => {
    const versions = new StoreVersions();
    const lists = new ListCache(versions);
    const { store, state } = fakeHome();
    const source = { prefix: "p", store };
    expect(await lists.verdict(source, facts("198.51.100.5"), "api", () => undefined)).toBeUndefined();
    state.entries = ["198.51.100.5"];
    state.version = 2;
    await lists.reread(source);
    expect(await lists.verdict(source, facts("198.51.100.5"), "api", () => undefined)).toBe("deny");
    expect(state.reads).toBe(2);
  });

  it("waits for a read in flight: the older read cannot land over it", async () => {
    const versions = new StoreVersions();
    const lists = new ListCache(versions);
    const { store, state } = fakeHome();
    const source = { prefix: "p", store };
    await lists.verdict(source, facts("198.51.100.6"), "api", () => undefined);
    // a background read starts (a decision reported a change) and its answer is held back
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    const slow = {
      ...store,
      pipeline: async () => {
        const before = [String(state.version), []];
        await gate;
        return before;
      },
    } as unknown as typeof store;
    versions.observe("home", 1);
    versions.observe("home", 2);
    const deferred: Array<Promise<unknown>> = [];
    await lists.verdict({ prefix: "p", store: slow }, facts("198.51.100.6"), "api", (p) => void deferred.push(p));
    expect(deferred).toHaveLength(1);
    // the admin's write, and its read back, while that read is in flight
    state.entries = ["198.51.100.6"];
    state.version = 3;
    const reread = lists.reread(source);
    release();
    await Promise.all([reread, ...deferred]);
    expect(await lists.verdict(source, facts("198.51.100.6"), "api", () => undefined)).toBe("deny");
  });

  it("is nothing to do before the lists were first read: that first read finds the write", async () => {
    const lists = new ListCache(new StoreVersions());
    const { store, state } = fakeHome();
    await lists.reread({ prefix: "p", store });
    expect(state.reads).toBe(0);
    state.entries = ["198.51.100.7"];
    expect(await lists.verdict({ prefix: "p", store }, facts("198.51.100.7"), "api", () => undefined)).toBe("deny");
  });
});
