import { describe, expect, it } from "vitest";
import { loadConfig, type Limit } from "../../config/index.js";
import { hashIdentifier } from "../../identity/hash.js";
import { bucketKey } from "../../store/layout.js";
import { clientIp, identify, type RequestFacts } from "../../identity/identify.js";
import { BlockedBuckets } from "./isolate/blocked.js";
import { rateLimitHeaders } from "./headers.js";
import { retryAfterSeconds } from "../../problem.js";
import type { LimitOutcome } from "./types.js";

function limits(...defs: Array<Record<string, unknown>>): Limit[] {
  const r = loadConfig({
    ORIGIN_URL: "https://o.example",
    SLUICE: { routes: [{ name: "r", match: "/", limits: defs }] },
  });
  if (!r.ok) throw r.error;
  return r.config.routes[0]!.limits;
}

const outcome = (limit: Limit, over: Partial<LimitOutcome>): LimitOutcome => ({
  limit,
  key: "k",
  cost: limit.cost,
  allowed: true,
  remaining: 0,
  retryAfterMs: 0,
  resetMs: 0,
  delayMs: 0,
  ...over,
});

describe("RateLimit headers", () => {
  const [perIp, site, shadow] = limits(
    { name: "per-ip", rate: 100, period: "1s", burst: 50 },
    { name: "site", key: "global", rate: 5000, period: "1m" },
    { name: "canary", rate: 1, period: "1s", shadow: true },
  ) as [Limit, Limit, Limit];

  it("report the limit closest to exhaustion, in the draft's structured form", () => {
    const h = rateLimitHeaders([
      outcome(perIp, { remaining: 3, resetMs: 470 }),
      outcome(site, { remaining: 4000, resetMs: 12_000 }),
    ]);
    expect(h).toEqual({ "RateLimit-Policy": '"per-ip";q=100;w=1;burst=50', RateLimit: '"per-ip";r=3;t=1' });
    const h2 = rateLimitHeaders([
      outcome(perIp, { remaining: 40, resetMs: 100 }),
      outcome(site, { remaining: 2, resetMs: 59_001 }),
    ]);
    expect(h2).toEqual({ "RateLimit-Policy": '"site";q=5000;w=60', RateLimit: '"site";r=2;t=60' });
  });

  it("never advertise a shadow limit", () => {
    expect(rateLimitHeaders([outcome(shadow, { remaining: 0 })])).toEqual({});
  });

  it("scale a sub-second period to whole seconds", () => {
    const [half] = limits({ name: "half", rate: 10, period: "500ms" }) as [Limit];
    expect(rateLimitHeaders([outcome(half, { remaining: 5, resetMs: 250 })])["RateLimit-Policy"]).toBe(
      '"half";q=20;w=1',
    );
  });

  it("Retry-After rounds up to whole seconds, at least one", () => {
    expect([retryAfterSeconds(1), retryAfterSeconds(1000), retryAfterSeconds(1001), retryAfterSeconds(0)]).toEqual([
      1, 1, 2, 1,
    ]);
  });
});

describe("BlockedBuckets", () => {
  it("answers until the deadline, then forgets", () => {
    const b = new BlockedBuckets(10);
    b.block("a", 1_000, 0);
    expect(b.remaining("a", 400)).toBe(600);
    expect(b.remaining("a", 1_000)).toBe(0);
    expect(b.size).toBe(0);
  });

  it("trusts a long refusal for a second at most, then asks Redis again", () => {
    const b = new BlockedBuckets(10, 1_000);
    b.block("a", 60_000, 0);
    expect(b.remaining("a", 999)).toBe(59_001);
    expect(b.remaining("a", 1_000)).toBe(0);
  });

  it("stays within its capacity, dropping the oldest entry", () => {
    const b = new BlockedBuckets(3);
    for (const k of ["a", "b", "c", "d"]) b.block(k, 100, 0);
    expect(b.size).toBe(3);
    expect(b.remaining("a", 0)).toBe(0);
    expect(b.remaining("d", 0)).toBe(100);
  });
});

describe("identities and keys", () => {
  const facts = (headers: Record<string, string>, url = "https://x/api?user=7"): RequestFacts => ({
    ip: clientIp(new Headers(headers)),
    matchPath: "/api",
    headers: new Headers(headers),
    url: new URL(url),
  });

  it("take the IP only from CF-Connecting-IP, never X-Forwarded-For", () => {
    expect(clientIp(new Headers({ "x-forwarded-for": "6.6.6.6", "cf-connecting-ip": "203.0.113.5" }))).toBe(
      "203.0.113.5",
    );
    expect(clientIp(new Headers({ "x-forwarded-for": "6.6.6.6" }))).toBe("unknown");
  });

  it("read headers, query, cookies and compounds; a missing part falls back to the IP, tagged", () => {
    const f = facts({ "cf-connecting-ip": "1.2.3.4", "x-api-key": "k1", cookie: "a=1; sid=s9" });
    const id = (r: ReturnType<typeof identify>) => (r.kind === "id" ? r.id : `(${r.kind})`);
    expect(JSON.parse(id(identify(["header:x-api-key", "query:user", "cookie:sid", "path", "global"], f)))).toEqual([
      ["header:x-api-key", "k1"],
      ["query:user", "7"],
      ["cookie:sid", "s9"],
      ["path", "/api"],
      ["global", "*"],
    ]);
    const missing = id(identify(["header:x-api-key"], facts({ "cf-connecting-ip": "1.2.3.4" })));
    expect(missing).not.toBe(
      id(identify(["header:x-api-key"], facts({ "cf-connecting-ip": "1.2.3.4", "x-api-key": "1.2.3.4" }))),
    );
    expect(JSON.parse(missing)).toEqual([["header:x-api-key", "missing->ip", "1.2.3.4"]]);
    expect(identify(["header:x-api-key"], facts({}), "skip")).toEqual({ kind: "skip" });
    expect(identify(["ip", "header:x-api-key"], facts({}), "reject")).toEqual({
      kind: "missing",
      part: "header:x-api-key",
    });
    expect(id(identify(["jwt:sub"], { ...facts({}), claims: { sub: "u1" } }, "reject"))).toBe('[["jwt:sub","u1"]]');
  });

  it("hash whatever the client sends into a short, fixed alphabet", async () => {
    const hostile = "a:b\r\n*{}".repeat(10_000);
    const h = await hashIdentifier(hostile);
    expect(h).toMatch(/^[0-9a-f]{32}$/);
    expect(await hashIdentifier(hostile)).toBe(h);
    expect(await hashIdentifier(hostile + "x")).not.toBe(h);
    expect(bucketKey("sluice", "r", "l", h)).toBe(`sluice:r:l:${h}`);
  });
});

describe("regions", async () => {
  const { chooseRegion, envConnections, allRegions } = await import("../../region/index.js");
  const config = {
    home_region: "us",
    regions: {
      us: { continents: ["NA", "SA"], colos: [] },
      eu: { continents: ["EU", "AF"], colos: ["DME"] },
      ap: { continents: ["AS"], colos: ["SIN"] },
    },
  };

  it("are chosen by colo first, then continent, else home", () => {
    expect(chooseRegion(config, { colo: "FRA", continent: "EU" })).toBe("eu");
    expect(chooseRegion(config, { colo: "DME", continent: "AS" })).toBe("eu"); // explicit colo wins
    expect(chooseRegion(config, { colo: "sin" })).toBe("ap");
    expect(chooseRegion(config, { continent: "OC" })).toBe("us");
    expect(chooseRegion(config, undefined)).toBe("us");
    expect(allRegions(config)).toEqual(["ap", "eu", "us"]);
  });

  it("use their own secrets, or the home region's when they have none", () => {
    const env = {
      UPSTASH_REDIS_REST_URL: "https://home",
      UPSTASH_REDIS_REST_TOKEN: "h",
      UPSTASH_REDIS_REST_URL_EU: "https://eu",
      UPSTASH_REDIS_REST_TOKEN_EU: "e",
    };
    const connect = envConnections(env, config.home_region);
    // each names the variables it was read from, for the errors of a misconfigured store (issue 30, point 4)
    const home = { url: "UPSTASH_REDIS_REST_URL", token: "UPSTASH_REDIS_REST_TOKEN" };
    const eu = { url: "UPSTASH_REDIS_REST_URL_EU", token: "UPSTASH_REDIS_REST_TOKEN_EU" };
    expect(connect("eu")).toEqual({ url: "https://eu", token: "e", names: eu });
    expect(connect("ap")).toEqual({ url: "https://home", token: "h", names: home });
    expect(connect("us")).toEqual({ url: "https://home", token: "h", names: home });
    expect(envConnections({}, "us")("us")).toBeUndefined();
  });
});
