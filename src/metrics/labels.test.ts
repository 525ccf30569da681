import { describe, expect, it } from "vitest";
import type { RequestFacts } from "../identity/identify.js";
import { clientLabel, ends, network } from "./labels.js";
import { collapseIsolates, MetricsBuffer } from "./index.js";

function facts(over: Partial<RequestFacts> & { header?: Record<string, string> } = {}): RequestFacts {
  return {
    ip: "203.0.113.9",
    matchPath: "/api/x",
    headers: new Headers(over.header ?? {}),
    url: new URL("https://gw.example/api/x?user=u-0123456789abcdefgh"),
    ...over,
  };
}

describe("network", () => {
  it("gives the /24 of IPv4 and the /48 of IPv6, as CIDRs the deny list takes", () => {
    expect(network("203.0.113.9")).toBe("203.0.113.0/24");
    expect(network("::ffff:203.0.113.9")).toBe("203.0.113.0/24");
    expect(network("2001:db8:1:2::5")).toBe("2001:db8:1::/48");
    expect(network("2001:0db8:00a0:ffff:1:2:3:4")).toBe("2001:db8:a0::/48");
    expect(network("unknown")).toBeUndefined();
  });
});

describe("ends", () => {
  it("keeps the first and last four characters of a secret, two of a short one, none of a tiny one", () => {
    expect(ends("sk_live_0123456789abcdef")).toBe("sk_l…cdef");
    expect(ends("0123456789abcdef")).toBe("0123…cdef");
    expect(ends("0123456789abcde")).toBe("01…");
    expect(ends("abcde")).toBe("ab…");
    expect(ends("abcd")).toBe("…");
  });
});

describe("clientLabel", () => {
  it("labels an IP in full or masked, with the matching deny entry", () => {
    expect(clientLabel({ key: ["ip"] }, facts(), "full")).toEqual({ label: "203.0.113.9", entry: "203.0.113.9" });
    expect(clientLabel({ key: ["ip"] }, facts(), "masked")).toEqual({
      label: "203.0.113.0/24",
      entry: "203.0.113.0/24",
    });
    expect(clientLabel({ key: ["ip"] }, facts({ ip: "2001:db8:1:2::5" }), "masked")).toEqual({
      label: "2001:db8:1::/48",
      entry: "2001:db8:1::/48",
    });
    expect(clientLabel({ key: ["ip"] }, facts({ ip: "unknown" }), "masked")).toEqual({ label: "unknown" });
  });

  it("shows the ends of an API key, cookie or query value and offers no entry for it", () => {
    const f = facts({ header: { "x-api-key": "sk_live_0123456789abcdef", cookie: "sid=s3cr3t-session-value-42" } });
    expect(clientLabel({ key: ["header:x-api-key"] }, f, "full")).toEqual({ label: "sk_l…cdef" });
    expect(clientLabel({ key: ["cookie:sid"] }, f, "masked")).toEqual({ label: "s3cr…e-42" });
    expect(clientLabel({ key: ["query:user"] }, f, "masked")).toEqual({ label: "u-01…efgh" });
  });

  it("shows the JWT subject as it is, with a jwt:sub entry; other claims by their ends", () => {
    const f = facts({ claims: { sub: "user-42", org: "org_0123456789abcdef" } });
    expect(clientLabel({ key: ["jwt:sub"] }, f, "masked")).toEqual({ label: "user-42", entry: "jwt:sub=user-42" });
    expect(clientLabel({ key: ["jwt:org"] }, f, "masked")).toEqual({ label: "org_…cdef" });
  });

  it("labels a missing part by the IP it was limited by, joins several parts, and leaves out path and global", () => {
    expect(clientLabel({ key: ["header:x-api-key"] }, facts(), "masked")).toEqual({
      label: "203.0.113.0/24",
      entry: "203.0.113.0/24",
    });
    const f = facts({ header: { "x-api-key": "sk_live_0123456789abcdef" } });
    expect(clientLabel({ key: ["ip", "path", "header:x-api-key"] }, f, "masked")).toEqual({
      label: "203.0.113.0/24 · sk_l…cdef",
      entry: "203.0.113.0/24",
    });
    expect(clientLabel({ key: ["global", "path"] }, f, "full")).toBeUndefined();
    expect(clientLabel({ key: ["path"] }, f, "full")).toBeUndefined();
  });

  it('labels the global bucket "global" in every mode, with no deny entry (issue 30, point 9)', () => {
    // it is every client's: its name gives nobody away, and there is no one client to ban
    for (const mode of ["full", "masked", "off"] as const)
      expect(clientLabel({ key: ["global"] }, facts(), mode)).toEqual({ label: "global" });
  });

  it('keeps nothing under labels = "off"', () => {
    expect(clientLabel({ key: ["ip"] }, facts(), "off")).toBeUndefined();
  });
});

describe("MetricsBuffer", () => {
  it("keeps the label beside the hashed id, and counts region figures apart from the decision counts", async () => {
    const m = new MetricsBuffer();
    m.count("api", "per-ip", "reject", {
      blockedId: "0123456789abcdef0123456789abcdef",
      label: { label: "203.0.113.0/24", entry: "203.0.113.0/24" },
      region: "eu",
      rttMs: 3,
    });
    m.count("api", "-", "allow", { region: "eu", local: true });
    m.count("api", "-", "degraded", { region: "eu", storeFailed: true });
    const written: Array<[string, ...unknown[]]> = [];
    const pipeline = new Proxy(
      {},
      {
        get: (_, op: string) => (op === "exec" ? async () => [] : (...args: unknown[]) => written.push([op, ...args])),
      },
    );
    const store = { pipeline: async (build: (batch: typeof pipeline) => void) => (build(pipeline), []) };
    const stores = { offPath: () => store } as unknown as Parameters<MetricsBuffer["flush"]>[1];
    await m.flush({ key_prefix: "t" }, stores, () => undefined, true);
    const ops = (op: string) => written.filter((w) => w[0] === op).map((w) => w.slice(1));
    expect(ops("hset").filter((w) => String(w[0]).includes(":labels:"))).toEqual([
      [
        expect.stringMatching(/^t:metrics:labels:\d+$/),
        {
          "api|0123456789abcdef0123456789abcdef": "203.0.113.0/24",
          "entry:api|0123456789abcdef0123456789abcdef": "203.0.113.0/24",
        },
      ],
    ]);
    // the minute's figures: one HSET under this isolate's field names, which the readers add up
    const minute = ops("hset").filter((w) => String(w[0]).includes(":m:"));
    expect(minute).toHaveLength(1);
    expect(ops("hincrby").filter((w) => String(w[0]).includes(":m:"))).toEqual([]);
    const fields = collapseIsolates(minute[0]![1] as Record<string, string>);
    expect(fields).toMatchObject({
      "region:eu|reject": "1",
      "region:eu|allow": "1",
      "region:eu|degraded": "1",
      "region:eu|local": "1",
      "region:eu|store-failed": "1",
      "rtt:eu|7": "1", // 3 ms: bucket ceil(4 log2 3) = 7
    });
    // the all-time counts (and the Prometheus endpoint reading them) get the decisions only
    const total = ops("hincrby").filter((w) => String(w[0]).endsWith(":total"));
    expect(total.map((w) => w[1]).sort()).toEqual(["api|-|allow", "api|-|degraded", "api|per-ip|reject"]);
    // the minute hash's and the all-time hash's TTLs on this isolate's first write of each; the refused clients' with them
    expect(ops("expire").map((w) => w[1])).toEqual([7200, 2_592_000, 7200, 7200]);
  });
});
