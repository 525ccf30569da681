import { describe, expect, it } from "vitest";
import { loadConfig, type Route } from "../../../config/index.js";
import { checkJobSize, MAX_JOB_BYTES, requestOf, toJob } from "./queue.js";

function route(extra: Record<string, unknown>): Route {
  const loaded = loadConfig({
    ORIGIN_URL: "http://origin.test",
    SLUICE: { routes: [{ name: "jobs", match: "/jobs", on_limit: "queue", ...extra }] },
  });
  if (!loaded.ok) throw loaded.error;
  return loaded.config.routes[0] as Route;
}

describe("a queued job keeps what its delivery is decided with", () => {
  const request = () =>
    new Request("https://sluice.test/jobs?x=1", {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-priority": "critical",
        "x-api-key": "k1",
        "x-other": "dropped",
      },
      body: "{}",
    });
  const facts = (r: Request) => ({ ip: "203.0.113.9", matchPath: "/jobs", headers: r.headers, url: new URL(r.url) });

  it("the headers its limits key on and its priority's header, nothing else beyond queue.headers", async () => {
    const r = request();
    const job = await toJob(
      r,
      route({ priority: "header:x-priority", limits: [{ name: "k", key: "header:x-api-key", rate: 1, period: "1s" }] }),
      facts(r),
      "home",
      "/jobs",
    );
    expect(Object.fromEntries(job.headers)).toEqual({
      "content-type": "application/json",
      "x-priority": "critical",
      "x-api-key": "k1",
    });
  });

  it("a priority named in the route keeps no header", async () => {
    const r = request();
    const job = await toJob(r, route({ priority: "critical" }), facts(r), "home", "/jobs");
    expect(Object.fromEntries(job.headers)).toEqual({ "content-type": "application/json" });
  });
});

describe("a queued job keeps the identity and host its live request had", () => {
  const jwtRoute = () =>
    route({
      priority: "jwt:prio",
      limits: [
        { name: "u", key: "jwt:sub", rate: 1, period: "1s", tier: "jwt:plan", rates: { pro: "5/1s" } },
        { name: "t", key: ["jwt:org", "ip"], rate: 1, period: "1s", tier: "header:x-plan", rates: { gold: "5/1s" } },
        { name: "c", key: "ip", rate: 10, period: "1s", cost: "header:x-cost", max_cost: 5 },
      ],
    });
  const request = () =>
    new Request("https://api.example.com/jobs?x=1", {
      method: "POST",
      headers: { "x-plan": "gold", "x-cost": "3", authorization: "Bearer not-kept", "x-other": "dropped" },
      body: "{}",
    });
  const facts = (r: Request, claims?: Record<string, unknown>) => ({
    ip: "203.0.113.9",
    matchPath: "/jobs",
    headers: r.headers,
    url: new URL(r.url),
    ...(claims ? { claims } : {}),
  });

  it("carries the verified claims its decision reads (keys, tier, priority), as text, and no others", async () => {
    const r = request();
    const claims = { sub: "alice", plan: "pro", prio: "critical", org: { id: 7 }, email: "alice@example.com", exp: 1 };
    const job = await toJob(r, jwtRoute(), facts(r, claims), "home", "/jobs");
    expect(job.claims).toEqual({ sub: "alice", plan: "pro", prio: "critical", org: '{"id":7}' });
  });

  it("carries no claims for a request without verified ones (its Authorization header is not kept)", async () => {
    const r = request();
    const job = await toJob(r, jwtRoute(), facts(r), "home", "/jobs");
    expect(job.claims).toBeUndefined();
    expect(Object.fromEntries(job.headers)).toEqual({
      "content-type": "text/plain;charset=UTF-8",
      "x-plan": "gold",
      "x-cost": "3",
    });
  });

  it("keeps the headers a tier or a cost is read from", async () => {
    const r = request();
    const job = await toJob(r, jwtRoute(), facts(r), "home", "/jobs");
    expect(job.headers.map(([h]) => h).sort()).toEqual(["content-type", "x-cost", "x-plan"]);
  });

  it("is delivered at the client's host and scheme; a job without them at a placeholder", async () => {
    const r = request();
    const job = await toJob(r, jwtRoute(), facts(r), "home", "/jobs");
    expect(job).toMatchObject({ host: "api.example.com", proto: "https" });
    expect(requestOf(job).url).toBe("https://api.example.com/jobs?x=1");
    expect(requestOf({ ...job, host: "shop.test:8080", proto: "http" }).url).toBe("http://shop.test:8080/jobs?x=1");
    const { host: _h, proto: _p, ...old } = job;
    expect(requestOf(old).url).toBe("https://queued.sluice/jobs?x=1");
    // anything but a bare host is not the one sluice kept
    expect(requestOf({ ...job, host: "evil.test/x?" }).url).toBe("https://queued.sluice/jobs?x=1");
    expect(requestOf({ ...job, host: "a@evil.test" }).url).toBe("https://queued.sluice/jobs?x=1");
  });

  it("refuses with a 413 problem a job larger than a queue message may be", async () => {
    const r = request();
    const job = await toJob(r, jwtRoute(), facts(r), "home", "/jobs");
    expect(() => checkJobSize(job)).not.toThrow();
    const big = { ...job, claims: { sub: "x".repeat(MAX_JOB_BYTES) } };
    expect(() => checkJobSize(big)).toThrow(/past the 127000 a queue message may hold/);
  });
});
