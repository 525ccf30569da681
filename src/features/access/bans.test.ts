import { describe, expect, it } from "vitest";
import { banDuration, banEntry, banHistoryMs } from "./bans.js";
import { loadConfig } from "../../config/index.js";
import type { RequestFacts } from "../../identity/identify.js";
import { prometheus } from "../../metrics/index.js";

const ORIGIN_URL = "https://api.example.com";
const BAN = { after: 20, within: "1m", for: ["2m", "10m", "1h"] };
const withLimit = (over: Record<string, unknown>) => ({
  ORIGIN_URL,
  SLUICE: {
    routes: [{ name: "login", match: "/login", limits: [{ name: "per-ip", rate: 5, period: "1m", ...over }] }],
  },
});

/** The field and message of an invalid configuration. */
function errorOf(over: Record<string, unknown>): { field: string; problem: string } {
  const r = loadConfig(withLimit(over));
  if (r.ok) throw new Error("expected an invalid configuration");
  return { field: r.error.field, problem: r.error.problem };
}

describe("ban: configuration", () => {
  it("takes after, within and for, durations in ms", () => {
    const r = loadConfig(withLimit({ ban: BAN }));
    if (!r.ok) throw r.error;
    expect(r.config.routes[0]?.limits[0]?.ban).toEqual({
      after: 20,
      within: 60_000,
      for: [120_000, 600_000, 3_600_000],
    });
  });

  it.each([
    ["header:x-api-key"],
    ["cookie:sid"],
    ["query:user"],
    [["jwt:sub"]], // an array of one part is one part
  ])("accepts a limit keyed on one client part: %j", (key) => {
    expect(loadConfig(withLimit({ key, ban: BAN })).ok).toBe(true);
  });

  it.each([
    [{ key: "global" }, "SLUICE.routes[0].limits[0].ban"],
    [{ key: "path" }, "SLUICE.routes[0].limits[0].ban"],
    [{ key: ["ip", "path"] }, "SLUICE.routes[0].limits[0].ban"],
    [{ key: ["ip", "header:x-k"] }, "SLUICE.routes[0].limits[0].ban"],
  ])("refuses a ban on a limit that does not name one client (%j), naming the field", (over, field) => {
    const e = errorOf({ ...over, ban: BAN });
    expect(e.field).toBe(field);
    expect(e.problem).toContain("keyed on one client part");
  });

  it.each([
    [{ ...BAN, for: ["10m", "2m"] }, "SLUICE.routes[0].limits[0].ban.for[1]", "at least the duration before it"],
    [{ ...BAN, for: ["2m", "1h", "1h", "10m"] }, "SLUICE.routes[0].limits[0].ban.for[3]", "at least"],
    [{ ...BAN, for: [] }, "SLUICE.routes[0].limits[0].ban.for", ""],
    [{ ...BAN, for: ["2m", "forever"] }, "SLUICE.routes[0].limits[0].ban.for[1]", "is not a duration"],
    [{ ...BAN, for: ["366d"] }, "SLUICE.routes[0].limits[0].ban.for[0]", "at most 365d"],
    [{ ...BAN, after: 0 }, "SLUICE.routes[0].limits[0].ban.after", ""],
    [{ ...BAN, after: 2.5 }, "SLUICE.routes[0].limits[0].ban.after", ""],
    [{ ...BAN, within: "a minute" }, "SLUICE.routes[0].limits[0].ban.within", "is not a duration"],
    [{ ...BAN, within: "2d" }, "SLUICE.routes[0].limits[0].ban.within", "at most 1d"],
    [{ after: 20, for: ["2m"] }, "SLUICE.routes[0].limits[0].ban.within", ""],
    [{ ...BAN, until: "1h" }, "SLUICE.routes[0].limits[0].ban", ""],
  ])("refuses %j, naming %s", (ban, field, message) => {
    const e = errorOf({ ban });
    expect(e.field).toBe(field);
    expect(e.problem).toContain(message);
  });

  it("accepts the same duration twice: a ban never gets shorter, it may stay as long", () => {
    expect(loadConfig(withLimit({ ban: { after: 1, within: "1s", for: ["1h", "1h"] } })).ok).toBe(true);
  });
});

describe("ban: escalation", () => {
  const FOR = [120_000, 600_000, 3_600_000];

  it("gives level n the n-th duration, and the last one to every level past them", () => {
    expect([1, 2, 3, 4, 5, 100].map((level) => banDuration(FOR, level))).toEqual([
      120_000, 600_000, 3_600_000, 3_600_000, 3_600_000, 3_600_000,
    ]);
    expect([1, 2, 7].map((level) => banDuration([60_000], level))).toEqual([60_000, 60_000, 60_000]);
  });

  it("never gives a level below the first less than the first duration", () => {
    expect(banDuration(FOR, 0)).toBe(120_000);
    expect(banDuration(FOR, -3)).toBe(120_000);
  });

  it("keeps a ban history a day, or twice the longest ban when that is longer", () => {
    expect(banHistoryMs(FOR)).toBe(86_400_000);
    expect(banHistoryMs([3_600_000, 2 * 86_400_000])).toBe(4 * 86_400_000);
  });
});

describe("ban: the deny entry that names the client", () => {
  const facts = (headers: Record<string, string> = {}, search = "", ip = "203.0.113.9"): RequestFacts => ({
    ip,
    matchPath: "/login",
    headers: new Headers(headers),
    url: new URL(`https://gw.example.com/login${search}`),
  });

  it("is the IP for ip, and <part>=<value> for the other parts", () => {
    expect(banEntry({ key: ["ip"] }, facts())).toBe("203.0.113.9");
    expect(banEntry({ key: ["ip"] }, facts({}, "", "2001:db8::1"))).toBe("2001:db8::1");
    expect(banEntry({ key: ["header:x-api-key"] }, facts({ "x-api-key": "k1" }))).toBe("header:x-api-key=k1");
    expect(banEntry({ key: ["cookie:sid"] }, facts({ cookie: "a=1; sid=s-9" }))).toBe("cookie:sid=s-9");
    expect(banEntry({ key: ["query:user"] }, facts({}, "?user=u7"))).toBe("query:user=u7");
    const withClaims = { ...facts(), claims: { sub: "user-42" } };
    expect(banEntry({ key: ["jwt:sub"] }, withClaims)).toBe("jwt:sub=user-42");
  });

  it("is the IP when the request did not carry the part (the limit counted it by its IP)", () => {
    expect(banEntry({ key: ["header:x-api-key"] }, facts())).toBe("203.0.113.9");
  });

  it("is none when no entry would name exactly this client", () => {
    expect(banEntry({ key: ["ip"] }, facts({}, "", "unknown"))).toBeUndefined();
    expect(banEntry({ key: ["query:user"] }, facts({}, "?user=%20u7"))).toBeUndefined();
    expect(banEntry({ key: ["query:user"] }, facts({}, "?user=u%0A7"))).toBeUndefined();
    expect(banEntry({ key: ["header:x-api-key"] }, facts({ "x-api-key": "k".repeat(400) }))).toBeUndefined();
  });
});

describe("ban: metrics", () => {
  it("counts bans apart from decisions, as sluice_bans_total", () => {
    const total = { "login|per-ip|reject": 40, "ban:login|per-ip": 2, "ban:api|per-key": 1 };
    const text = prometheus(total, {});
    expect(text).toContain("# TYPE sluice_bans_total counter\n");
    expect(text).toContain('sluice_bans_total{route="login",limit="per-ip"} 2\n');
    expect(text).toContain('sluice_bans_total{route="api",limit="per-key"} 1\n');
    expect(text).toContain('sluice_decisions_total{route="login",limit="per-ip",decision="reject"} 40\n');
    expect(text).not.toMatch(/sluice_decisions_total\{route="ban:/);
  });
});
