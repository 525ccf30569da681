import { describe, expect, it } from "vitest";
import { MAX_OVERRIDES, OverrideCopies, REFRESH_AFTER_MS, TRUSTED_MS, type OverrideAddress } from "./overrides.js";
import type { Store } from "../../../store/redis.js";

/** A store whose override hash is whatever `hash` holds, counting the commands asked of it. */
function fakeStore(id: string, hash: () => Record<string, string> | Error) {
  const asked = { hgetall: 0, hlen: 0 };
  const read = () => {
    const h = hash();
    if (h instanceof Error) throw h;
    return h;
  };
  const commands = {
    getAll: async () => {
      asked.hgetall++;
      return { ...read() };
    },
    len: async () => {
      asked.hlen++;
      return Object.keys(read()).length;
    },
  };
  const store = { name: id, id, hash: commands, run: async () => null, script: () => null } as unknown as Store;
  return { store, asked };
}

/** Runs the refresh as the gateway would (deferred work collected) and waits for it. */
async function refresh(
  copies: OverrideCopies,
  buckets: Array<{ key: string; store: Store }>,
  now: number,
  changed: string[] = [],
): Promise<number> {
  const work: Array<Promise<unknown>> = [];
  copies.refresh(
    buckets,
    now,
    (p) => work.push(p),
    (prefix) => changed.push(prefix),
  );
  await Promise.all(work);
  return work.length;
}

describe("the isolate's copy of the overrides", () => {
  it("is read by the script until the first copy is in; then the bucket's two fields come from the copy", async () => {
    const copies = new OverrideCopies();
    const { store, asked } = fakeStore("s1", () => ({
      "per-ip:*": "50:50:1000:9999999999999",
      "per-ip:abc": "9:9:1000:9999999999999",
      "per-ip:other": "1:1:1:1",
      "site:*": "7:7:1:9",
    }));
    const b = { key: "p:api:per-ip:abc", store };
    const now = Date.now();
    // before any counter is seen, an empty copy at version 0: the script reads the hash unless it finds the counter at 0
    expect(copies.input(b, now)).toEqual({ version: 0 });
    // before any decision has reported the Redis's change counter, nothing is fetched: the script reads
    expect(await refresh(copies, [b], now)).toBe(0);
    copies.observe(store, 3, now);
    expect(await refresh(copies, [b], now)).toBe(1);
    expect(asked.hgetall).toBe(1);
    expect(copies.input(b, now)).toEqual({
      everybody: "50:50:1000:9999999999999",
      own: "9:9:1000:9999999999999",
      version: 3,
    });
    expect(copies.input({ key: "p:api:per-ip:zzz", store }, now)).toEqual({
      everybody: "50:50:1000:9999999999999",
      own: undefined,
      version: 3,
    });
    expect(copies.input({ key: "p:api:site:zzz", store }, now)).toEqual({
      everybody: "7:7:1:9",
      own: undefined,
      version: 3,
    });
    // another route of the same Redis has a copy of its own
    expect(copies.input({ key: "p:other:per-ip:abc", store }, now)).toBe("read");
  });

  it("is trusted while the change counter stands still, however old, and refetched only when it moves", async () => {
    const copies = new OverrideCopies();
    const { store, asked } = fakeStore("s2", () => ({}));
    const b = { key: "p:api:per-ip:abc", store };
    const start = Date.now();
    copies.observe(store, 1, start);
    await refresh(copies, [b], start);
    for (const later of [TRUSTED_MS + 50, 60_000, 3_600_000]) {
      copies.observe(store, 1, start + later);
      expect(copies.input(b, start + later)).toEqual({ everybody: undefined, own: undefined, version: 1 });
      expect(await refresh(copies, [b, b], start + later)).toBe(0);
    }
    expect(asked.hgetall).toBe(1);
    // the counter moves: the copy is still used while its refetch is on the way, for TRUSTED_MS at most
    const moved = start + 3_700_000;
    copies.observe(store, 2, moved);
    // sent with the version it was read at: the script sees the counter moved and reads the hash itself
    expect(copies.input(b, moved + TRUSTED_MS)).toEqual({ everybody: undefined, own: undefined, version: 1 });
    expect(copies.input(b, moved + TRUSTED_MS + 1)).toBe("read");
    expect(await refresh(copies, [b, b], moved)).toBe(1);
    expect(asked.hgetall).toBe(2);
    expect(copies.input(b, moved + 60_000)).toEqual({ everybody: undefined, own: undefined, version: 2 });
  });

  it("tells which route changed, so refusals decided on old figures can be forgotten", async () => {
    const copies = new OverrideCopies();
    let hash: Record<string, string> = {};
    const { store } = fakeStore("s3", () => hash);
    const b = { key: "p:api:per-ip:abc", store };
    const changed: string[] = [];
    const start = Date.now();
    copies.observe(store, 1, start);
    await refresh(copies, [b], start, changed);
    copies.observe(store, 2, start + 1_000);
    await refresh(copies, [b], start + 1_000, changed);
    expect(changed).toEqual([]); // first copy, then the same again
    hash = { "per-ip:abc": "10:10:1000:9999999999999" };
    copies.observe(store, 3, start + 2_000);
    await refresh(copies, [b], start + 2_000, changed);
    expect(changed).toEqual(["p:api:"]);
  });

  it(`keeps no copy of a hash with more than ${MAX_OVERRIDES} fields, then asks only its size until it shrinks`, async () => {
    const copies = new OverrideCopies();
    const many = Object.fromEntries(
      Array.from({ length: MAX_OVERRIDES + 1 }, (_, i) => [`per-ip:${i}`, "10:10:1000:9999999999999"]),
    );
    let hash: Record<string, string> = many;
    const { store, asked } = fakeStore("s4", () => hash);
    const b = { key: "p:api:per-ip:abc", store };
    const start = Date.now();
    copies.observe(store, 1, start);
    await refresh(copies, [b], start);
    expect(copies.input(b, start)).toBe("read");
    copies.observe(store, 2, start + 1_000);
    await refresh(copies, [b], start + 1_000);
    expect(asked).toEqual({ hgetall: 1, hlen: 1 });
    expect(copies.input(b, start + 1_000)).toBe("read");
    hash = { "per-ip:abc": "10:10:1000:9999999999999" };
    copies.observe(store, 3, start + 2_000);
    await refresh(copies, [b], start + 2_000);
    expect(asked).toEqual({ hgetall: 2, hlen: 2 });
    expect(copies.input(b, start + 2_000)).toEqual({
      everybody: undefined,
      own: "10:10:1000:9999999999999",
      version: 3,
    });
  });

  it("keeps the last copy when Redis fails, until it is too far behind to trust, and asks again at most every 800 ms", async () => {
    const copies = new OverrideCopies();
    let down = false;
    const { store, asked } = fakeStore("s5", () =>
      down ? new Error("unreachable") : { "per-ip:*": "50:50:1000:9999999999999" },
    );
    const b = { key: "p:api:per-ip:abc", store };
    const start = Date.now();
    copies.observe(store, 1, start);
    await refresh(copies, [b], start);
    down = true;
    copies.observe(store, 2, start + REFRESH_AFTER_MS);
    await refresh(copies, [b], start + REFRESH_AFTER_MS);
    expect(copies.input(b, start + REFRESH_AFTER_MS + TRUSTED_MS - 1)).toEqual({
      everybody: "50:50:1000:9999999999999",
      own: undefined,
      version: 1,
    });
    expect(copies.input(b, start + REFRESH_AFTER_MS + TRUSTED_MS + 1)).toBe("read");
    expect(await refresh(copies, [b], start + REFRESH_AFTER_MS + 100)).toBe(0);
    expect(await refresh(copies, [b], start + 2 * REFRESH_AFTER_MS)).toBe(1);
    expect(asked.hgetall).toBe(3);
  });

  it("starts empty at version 0 and fetches nothing while the counter reads 0; a counter past 0 sends the script to the hash", async () => {
    const { store, asked } = fakeStore("s7", () => ({ "per-ip:*": "50:50:1000:9999999999999" }));
    const copies = new OverrideCopies();
    const b = { key: "p:api:per-ip:abc", store };
    const now = Date.now();
    copies.observe(store, 0, now);
    expect(await refresh(copies, [b], now)).toBe(0);
    expect(asked.hgetall).toBe(0);
    expect(copies.input(b, now)).toEqual({ everybody: undefined, own: undefined, version: 0 });
    // another route of the Redis, first seen after the counter moved: no copy, so the script reads
    copies.observe(store, 1, now + 1);
    expect(copies.input({ key: "p:new:per-ip:abc", store }, now + 1)).toBe("read");
    expect(await refresh(copies, [b], now + 1)).toBe(1);
    expect(copies.input(b, now + 1)).toEqual({ everybody: "50:50:1000:9999999999999", own: undefined, version: 1 });
  });

  it("belongs to its isolate: another OverrideCopies has none of its copies; past its capacity the oldest goes", async () => {
    const { store, asked } = fakeStore("s6", () => ({ "per-ip:*": "50:50:1000:9999999999999" }));
    const copies = new OverrideCopies(2);
    const [a, b, c] = ["a", "b", "c"].map((route) => ({ key: `p:${route}:per-ip:abc`, store })) as [
      OverrideAddress,
      OverrideAddress,
      OverrideAddress,
    ];
    const now = Date.now();
    copies.observe(store, 1, now);
    await refresh(copies, [a, b], now);
    expect(copies.input(a, now)).not.toBe("read");
    // another isolate's copies start empty, at version 0 (the script reads the hash, the counter being 1)
    expect(new OverrideCopies().input(a, now)).toEqual({ version: 0 });
    await refresh(copies, [c], now);
    expect(copies.size).toBe(2);
    expect([copies.input(a, now), copies.input(b, now) === "read", copies.input(c, now) === "read"]).toEqual([
      "read",
      false,
      false,
    ]);
    expect(asked.hgetall).toBe(3);
  });
});
