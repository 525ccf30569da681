import { afterEach, describe, expect, it, vi } from "vitest";
import { loadConfig } from "../config/index.js";
import { collapseIsolates, FLUSH_EVERY_MS, MetricsBuffer } from "./index.js";

/** A stand-in home store whose pipeline records every command a flush sends. */
function recorder() {
  const sent: Array<[string, ...unknown[]]> = [];
  const pipeline = new Proxy(
    {},
    {
      get:
        (_, op: string) =>
        (...args: unknown[]) =>
          sent.push([op, ...args]),
    },
  );
  const store = { pipeline: async (build: (batch: typeof pipeline) => void) => (build(pipeline), []) };
  const stores = { offPath: () => store } as unknown as Parameters<MetricsBuffer["flush"]>[1];
  return { sent, stores, ops: (op: string) => sent.filter((c) => c[0] === op).map((c) => c.slice(1)) };
}

const flush = (m: MetricsBuffer, stores: Parameters<MetricsBuffer["flush"]>[1], metrics?: "redis" | "off") =>
  m.flush({ key_prefix: "t", ...(metrics ? { metrics } : {}) }, stores, () => undefined);

afterEach(() => vi.useRealTimers());

describe("MetricsBuffer's flush", () => {
  it("writes nothing before an interval has passed since the isolate started counting, nor when nothing was counted", async () => {
    vi.useFakeTimers({ now: 1_000 * 60_000 + 5_000 });
    const m = new MetricsBuffer();
    const r = recorder();
    expect(flush(m, r.stores)).toBeUndefined(); // nothing counted
    m.count("api", "-", "allow");
    expect(flush(m, r.stores)).toBeUndefined(); // the interval starts with the first count
    vi.advanceTimersByTime(FLUSH_EVERY_MS - 1);
    m.count("api", "-", "allow");
    expect(flush(m, r.stores)).toBeUndefined();
    expect(r.sent).toEqual([]);
    vi.advanceTimersByTime(1);
    await flush(m, r.stores);
    expect(r.ops("hset")).toHaveLength(1);
    // nothing counted since: an interval later still nothing to write
    vi.advanceTimersByTime(FLUSH_EVERY_MS);
    expect(flush(m, r.stores)).toBeUndefined();
    expect(r.ops("hset")).toHaveLength(1);
  });

  it("is one HSET of the minute's figures (cumulative under this isolate's fields), an HINCRBY per all-time counter, and an EXPIRE only on a key's first write", async () => {
    vi.useFakeTimers({ now: 2_000 * 60_000 });
    const m = new MetricsBuffer();
    const r = recorder();
    m.count("api", "-", "allow", { region: "eu", rttMs: 3 });
    m.count("api", "-", "allow", { region: "eu", rttMs: 5 });
    await m.flush({ key_prefix: "t" }, r.stores, () => undefined, true);
    expect(r.sent.map((c) => c[0])).toEqual(["hset", "expire", "hincrby", "expire"]);
    const [minuteKey, first] = r.ops("hset")[0] as [string, Record<string, string>];
    expect(minuteKey).toBe("t:metrics:m:2000");
    expect(Object.keys(first).every((f) => f.endsWith(`@${m.isolate}`))).toBe(true);
    expect(collapseIsolates(first)).toMatchObject({ "api|-|allow": "2", "region:eu|allow": "2", rtt_count: "2" });
    expect(r.ops("hincrby")).toEqual([["t:metrics:total", "api|-|allow", 2]]);
    expect(r.ops("expire")).toEqual([
      ["t:metrics:m:2000", 7200],
      ["t:metrics:total", 2_592_000],
    ]);

    // later in the same minute: the same fields, written whole with this isolate's running figures; no EXPIRE
    r.sent.length = 0;
    vi.advanceTimersByTime(20_000);
    m.count("api", "-", "allow", { region: "eu" });
    await m.flush({ key_prefix: "t" }, r.stores, () => undefined, true);
    expect(r.sent.map((c) => c[0])).toEqual(["hset", "hincrby"]);
    expect(collapseIsolates(r.ops("hset")[0]![1] as Record<string, string>)).toMatchObject({
      "api|-|allow": "3",
      "region:eu|allow": "3",
    });

    // a new minute: a new key, so its TTL once more; the all-time hash's not before a day
    r.sent.length = 0;
    vi.advanceTimersByTime(60_000);
    m.count("api", "-", "allow");
    await m.flush({ key_prefix: "t" }, r.stores, () => undefined, true);
    expect(r.sent.map((c) => c[0])).toEqual(["hset", "expire", "hincrby"]);
    expect(collapseIsolates(r.ops("hset")[0]![1] as Record<string, string>)).toEqual({ "api|-|allow": "1" });
  });

  it('under metrics = "off" writes nothing, and keeps nothing counted', async () => {
    vi.useFakeTimers({ now: 3_000 * 60_000 });
    const m = new MetricsBuffer();
    const r = recorder();
    m.count("api", "per-ip", "reject", { blockedId: "0123456789abcdef0123456789abcdef" });
    expect(m.flush({ key_prefix: "t", metrics: "off" }, r.stores, () => undefined, true)).toBeUndefined();
    vi.advanceTimersByTime(FLUSH_EVERY_MS);
    expect(flush(m, r.stores, "off")).toBeUndefined();
    expect(r.sent).toEqual([]);
    // what was counted under "off" is gone: switching to "redis" writes only what is counted from then on
    m.count("api", "-", "allow");
    await m.flush({ key_prefix: "t", metrics: "redis" }, r.stores, () => undefined, true);
    expect(r.ops("hincrby")).toEqual([["t:metrics:total", "api|-|allow", 1]]);
  });

  it("adds the isolates' fields up for the readers; a field without an isolate is taken as it is", () => {
    expect(
      collapseIsolates({ "api|-|allow@a1": "2", "api|-|allow@b2": "3", rtt_count: "4", "rtt_count@a1": "1" }),
    ).toEqual({ "api|-|allow": "5", rtt_count: "5" });
  });
});

describe("the metrics setting", () => {
  it('defaults to "redis", takes "off", and names the field when it is anything else', () => {
    const base = { ORIGIN_URL: "https://o.example" };
    const dflt = loadConfig({ ...base, SLUICE: {} });
    expect(dflt.ok && dflt.config.metrics).toBe("redis");
    const off = loadConfig({ ...base, SLUICE: { metrics: "off" } });
    expect(off.ok && off.config.metrics).toBe("off");
    const bad = loadConfig({ ...base, SLUICE: { metrics: "statsd" } });
    expect(bad.ok).toBe(false);
    expect(bad.ok ? "" : String(bad.error.message)).toMatch(/metrics/);
  });
});
