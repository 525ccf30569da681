import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, startWorker, type DemoOrigin, type RedisStack, sleep, useStack } from "./stack.js";

const ADMIN = "operator-token-0123456789";
const SLUICE: SluiceInput = {
  key_prefix: "o",
  timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
  routes: [
    { name: "api", match: "/api/*", limits: [{ name: "per-ip", rate: 2, period: "1h" }] },
    { name: "trial", match: "/trial", shadow: true, limits: [{ name: "per-ip", rate: 1, period: "1h" }] },
    { name: "open", match: "/open" },
    {
      name: "log",
      match: "/log",
      limits: [{ name: "provider", key: "global", rate: 5, period: "1s", algorithm: "sliding_log", margin: "200ms" }],
    },
  ],
};

const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
let stack: RedisStack;
let origin: DemoOrigin;
let mf: Miniflare;
beforeAll(() => {
  ({ stack, origin, mf } = rig);
});

const auth = { authorization: `Bearer ${ADMIN}` };
const admin = (path: string, method = "GET", body?: unknown) =>
  call(mf, `/__sluice${path}`, {
    method,
    headers: { ...auth, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });

describe("the admin API's door", () => {
  const routes = [
    "/config",
    "/ledger",
    "/metrics",
    "/overrides",
    "/lists",
    "/buckets/api/per-ip?ip=1.2.3.4",
    "/api/dashboard",
  ];
  it.each(routes)("%s needs the token: none or a wrong one of the same length is a 401 problem", async (path) => {
    const attempts: Array<Record<string, string>> = [
      {},
      { authorization: `Bearer ${"y".repeat(ADMIN.length)}` },
      { authorization: ADMIN },
    ];
    // a client of its own per route: all these failures from one IP would be throttled (429) after 10
    const ip = `198.18.0.${routes.indexOf(path) + 1}`;
    for (const headers of attempts) {
      const r = await call(mf, `/__sluice${path}`, { headers, ip });
      expect(r.status).toBe(401);
      expect(r.headers.get("content-type")).toBe("application/problem+json");
    }
    expect((await admin(path)).status).toBe(200);
  });

  it("health needs no token to say sluice is up; with the token it reports each region, and no secrets", async () => {
    const open = await call(mf, "/__sluice/health");
    expect(open.status).toBe(200);
    expect(open.json()).toEqual({ status: "up" });
    const r = await admin("/health");
    expect(r.status).toBe(200);
    expect(r.json()).toMatchObject({ ok: true, regions: [{ region: "home", reachable: true }] });
    expect(r.text).not.toContain(stack.bridge.url);
  });

  it("is off entirely without a token configured", async () => {
    const noToken = startWorker({ sluice: SLUICE, origin: origin.url, redisRestUrl: stack.bridge.url });
    try {
      expect((await call(noToken, "/__sluice/config", { headers: auth })).status).toBe(404);
    } finally {
      await noToken.dispose();
    }
  });

  it("shows the effective configuration with secrets redacted", async () => {
    const r = await admin("/config");
    expect(r.json()).toMatchObject({
      key_prefix: "o",
      routes: [{ name: "api" }, { name: "trial" }, { name: "open" }, { name: "log" }],
    });
    expect(r.text).not.toContain(ADMIN);
    expect(r.text).not.toContain("test-token");
  });
});

describe("buckets and overrides", () => {
  it("reads a bucket without spending and resets it", async () => {
    const ip = "203.0.113.70";
    await call(mf, "/api/a", { ip });
    const before = (await admin(`/buckets/api/per-ip?ip=${ip}`)).json();
    expect(before).toMatchObject({ remaining: 1, would_allow: true });
    expect((await admin(`/buckets/api/per-ip?ip=${ip}`)).json().remaining).toBe(1); // peeking spent nothing
    await call(mf, "/api/a", { ip });
    expect((await call(mf, "/api/a", { ip })).status).toBe(429);
    expect((await admin(`/buckets/api/per-ip?ip=${ip}`, "DELETE")).status).toBe(200);
    await sleep(1_050); // the refusing isolate trusts its cache for a second at most
    expect((await call(mf, "/api/a", { ip })).status).toBe(200);
  });

  it("an override for one client takes effect within a second, and expiry restores the configured rate", async () => {
    const ip = "203.0.113.71";
    await call(mf, "/api/b", { ip });
    await call(mf, "/api/b", { ip });
    expect((await call(mf, "/api/b", { ip })).status).toBe(429);
    // 10 a second instead of 2 an hour: the empty bucket refills within the second
    const set = await admin("/overrides", "PUT", {
      route: "api",
      limit: "per-ip",
      rate: 10,
      burst: 10,
      period: "1s",
      identity: { ip },
      ttl: "3s",
    });
    expect(set.status).toBe(200);
    await sleep(1_050);
    expect((await call(mf, "/api/b", { ip })).status).toBe(200);
    expect((await call(mf, "/api/b", { ip: "203.0.113.72" })).headers.get("ratelimit")).toMatch(/^"per-ip";r=1;/); // others unchanged
    expect((await admin("/overrides")).json().overrides).toHaveLength(1);
    await sleep(2_200);
    // expired: back to a burst of 2, and the bucket holds more than that, so it clamps down
    expect((await call(mf, "/api/b", { ip })).headers.get("ratelimit")).toMatch(/^"per-ip";r=[01];/);
    expect((await admin("/overrides")).json().overrides).toHaveLength(0);
  });

  it("an override for everybody changes every bucket of the limit", async () => {
    expect((await admin("/overrides", "PUT", { route: "api", limit: "per-ip", rate: 50, ttl: "1m" })).status).toBe(200);
    await sleep(1_050);
    expect((await call(mf, "/api/c", { ip: "203.0.113.73" })).headers.get("ratelimit")).toMatch(/^"per-ip";r=49;/);
    expect((await admin("/overrides", "DELETE", { route: "api", limit: "per-ip" })).status).toBe(200);
    await sleep(1_050);
    expect((await call(mf, "/api/c", { ip: "203.0.113.74" })).headers.get("ratelimit")).toMatch(/^"per-ip";r=1;/);
  });

  it("refuses malformed admin input with a 400 problem", async () => {
    expect((await admin("/overrides", "PUT", { route: "api", limit: "per-ip", rate: -1, ttl: "1m" })).status).toBe(400);
    expect((await admin("/lists", "PUT", { kind: "deny", entry: "not an ip", ttl: "1m" })).status).toBe(400);
    expect((await admin("/overrides", "PUT", { route: "nope", limit: "x", rate: 1, ttl: "1m" })).status).toBe(404);
    // a sliding log's margin is added to the override's period too: a period shorter than it is refused
    const short = await admin("/overrides", "PUT", {
      route: "log",
      limit: "provider",
      rate: 5,
      period: "100ms",
      ttl: "1m",
    });
    expect(short.status, short.text).toBe(400);
    expect(short.json().detail).toContain("margin (200 ms)");
    const ok = { route: "log", limit: "provider", rate: 5, period: "500ms", ttl: "1m" };
    expect((await admin("/overrides", "PUT", ok)).status).toBe(200);
    expect((await admin("/overrides", "DELETE", { route: "log", limit: "provider" })).status).toBe(200);
  });
});

describe("deny and allow lists", () => {
  it("a CIDR on the deny list gets 403 within five seconds; an allow entry skips the limits of its routes", async () => {
    expect((await admin("/lists", "PUT", { kind: "deny", entry: "198.51.100.0/24", ttl: "1m" })).status).toBe(200);
    expect(
      (await admin("/lists", "PUT", { kind: "allow", entry: "192.0.2.9", ttl: "1m", routes: ["api"] })).status,
    ).toBe(200);
    let status = 0;
    for (let i = 0; i < 70 && status !== 403; i++) {
      status = (await call(mf, "/open", { ip: "198.51.100.23" })).status;
      if (status !== 403) await sleep(100);
    }
    expect(status).toBe(403);
    expect((await call(mf, "/open", { ip: "198.51.101.23" })).status).toBe(200);
    for (let i = 0; i < 5; i++) expect((await call(mf, "/api/d", { ip: "192.0.2.9" })).status).toBe(200);
    const r = await call(mf, "/api/d", { ip: "192.0.2.9" });
    expect(r.headers.get("ratelimit")).toBeNull(); // no limit ran
  });

  it("every change through the API goes to the ledger, with who made it (the bearer token) and when", async () => {
    const before = Date.now();
    await admin("/lists", "PUT", { kind: "deny", entry: "203.0.113.200", ttl: "1m", note: "ledgered" });
    await admin("/lists", "DELETE", { kind: "deny", entry: "203.0.113.200" });
    await admin("/overrides", "PUT", {
      route: "api",
      limit: "per-ip",
      rate: 9,
      ttl: "1m",
      identity: { ip: "203.0.113.201" },
    });
    await admin("/overrides", "DELETE", { route: "api", limit: "per-ip", identity: { ip: "203.0.113.201" } });
    const entries = (await admin("/ledger?count=20")).json().entries as Array<Record<string, string>>;
    const mine = entries.filter((e) => Number(e.at) >= before && e.event?.startsWith("admin_")).reverse();
    expect(mine.map((e) => [e.event, e.who])).toEqual([
      ["admin_ban", "token"],
      ["admin_unban", "token"],
      ["admin_override", "token"],
      ["admin_override_removed", "token"],
    ]);
    expect(JSON.parse(mine[0]?.detail ?? "")).toMatchObject({ kind: "deny", entry: "203.0.113.200", ttl: "1m" });
    expect(JSON.parse(mine[1]?.detail ?? "")).toEqual({ kind: "deny", entry: "203.0.113.200", removed: true });
    const override = JSON.parse(mine[2]?.detail ?? "") as Record<string, unknown>;
    expect(override).toMatchObject({ route: "api", limit: "per-ip", rate: 9, ttl: "1m" });
    expect(override.field).toMatch(/^per-ip:[0-9a-f]{32}$/); // the client as its bucket hash, as the overrides hold it
    expect(JSON.stringify(mine)).not.toContain("203.0.113.201");
  });
});

describe("shadow mode and metrics", () => {
  it("a shadow route forwards everything and counts what it would have refused", async () => {
    const seen = origin.seen.length;
    const decisions = [];
    for (let i = 0; i < 4; i++)
      decisions.push((await call(mf, "/trial", { ip: "203.0.113.80" })).headers.get("sluice-decision"));
    expect(decisions).toEqual(["allow", "shadow", "shadow", "shadow"]);
    expect(origin.seen.length).toBe(seen + 4);
  });

  it("exposes counts in the Prometheus text format that match the requests sent", async () => {
    const m = await admin("/metrics");
    expect(m.headers.get("content-type")).toMatch(/^text\/plain; version=0.0.4/);
    const samples = new Map<string, number>();
    for (const line of m.text.split("\n")) {
      if (line === "" || line.startsWith("# HELP ") || line.startsWith("# TYPE ")) continue;
      const match =
        /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (-?[0-9.e+-]+)$/.exec(line);
      expect(match, line).not.toBeNull();
      samples.set(`${match![1]}${match![2] ?? ""}`, Number(match![3]));
    }
    expect(samples.get('sluice_decisions_total{route="trial",limit="per-ip",decision="shadow"}')).toBe(3);
    expect(samples.get('sluice_decisions_total{route="trial",limit="-",decision="allow"}')).toBe(1);
    expect(
      samples.get('sluice_decisions_total{route="open",limit="deny-list",decision="reject"}'),
    ).toBeGreaterThanOrEqual(1);
    expect(samples.get("sluice_redis_round_trips")).toBeGreaterThan(0);
  });

  it("gives the dashboard's figures: refused clients by their masked label, and each region's", async () => {
    const ip = "203.0.113.90";
    for (let i = 0; i < 3; i++) await call(mf, "/api/f", { ip });
    await admin("/metrics"); // flushes this isolate's counts now rather than within five seconds
    const data = (await admin("/api/dashboard")).json() as {
      top_blocked: Array<Record<string, unknown>>;
      regions: Array<Record<string, unknown>>;
      routes: Array<{ route: string; limits: unknown[] }>;
    };
    expect(data.top_blocked).toContainEqual(
      expect.objectContaining({ route: "api", label: "203.0.113.0/24", entry: "203.0.113.0/24" }),
    );
    expect(JSON.stringify(data)).not.toContain(ip);
    expect(data.regions).toEqual([
      expect.objectContaining({ region: "home", per_second: expect.objectContaining({ allow: expect.any(Number) }) }),
    ]);
    expect(data.routes.find((r) => r.route === "api")?.limits).toContainEqual(
      expect.objectContaining({ limit: "per-ip", shed: expect.any(Number) }),
    );
  });
});

describe("problem types", () => {
  it("points a refusal's type at a page the Worker serves to anybody", async () => {
    const ip = "203.0.113.91";
    for (let i = 0; i < 2; i++) expect((await call(mf, "/api/g", { ip })).status).toBe(200);
    const refused = await call(mf, "/api/g", { ip });
    expect(refused.status).toBe(429);
    expect(refused.json().type).toBe("/__sluice/problems/too-many-requests");
    const page = await call(mf, "/__sluice/problems/too-many-requests");
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    expect(page.text).toContain("<h1>Too many requests</h1>");
    expect(page.text).toContain("Retry-After");
    const unknown = await call(mf, "/__sluice/problems/no-such-thing");
    expect(unknown.status).toBe(404);
    expect(unknown.json().type).toBe("/__sluice/problems/not-found");
  });
});
