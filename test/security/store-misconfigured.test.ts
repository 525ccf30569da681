/**
 * Regression (issue 30, point 4): a wrong Redis URL or token was silent, and its log showed the
 * password. A missing secret was a loud `500` naming the variable, but a token the database
 * refuses (`401`), a URL without a scheme (`127.0.0.1:39943`) or the `rediss://` form of the
 * Upstash console all fell to `on_store_error = "local"`: each isolate limiting alone,
 * `Sluice-Decision: degraded`, and the log line quoted `rediss://default:<password>@…`. Now such a
 * store is a configuration error, loud like a missing one: the same `500` problem naming the
 * variable for guarded requests (limits and guards alike), health naming it, `limiter()` throwing
 * a `ConfigError`; and no secret reaches a log line or a response. Also the `401` for a bearer
 * token that does not verify: its detail quoted hono's message, which quotes the client's token.
 *
 * Each Worker runs in workerd against the real bridge (which answers a wrong token `401`, as
 * Upstash does), its standard output and error captured.
 */
import { sign } from "hono/jwt";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { limiter } from "../../src/middleware/limiter.js";
import { ConfigError } from "../../src/config/index.js";
import { Runtime } from "../../src/runtime.js";
import { call, TOKEN, useStack } from "../integration/stack.js";

const ADMIN = "store-misconfigured-admin-token";
const JWT_SECRET = "store-misconfigured-jwt-secret";
const SLUICE: SluiceInput = {
  key_prefix: "sm",
  timeout_ms: 2_000,
  // the default, written out: what every misconfigured store fell to on main
  on_store_error: "local",
  routes: [
    {
      name: "limited",
      match: "/limited",
      methods: ["GET"],
      limits: [{ name: "per-ip", key: "ip", rate: 100, period: "1s" }],
    },
    { name: "pay", match: "/pay", methods: ["POST"], idempotency: { ttl: "1h" } },
    {
      name: "mine",
      match: "/mine",
      methods: ["GET"],
      limits: [{ name: "per-user", key: "jwt:sub", rate: 100, period: "1s" }],
    },
  ],
};

const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN, SLUICE_JWT_SECRET: JWT_SECRET } });

type Answer = Awaited<ReturnType<typeof call>>;
const show = (r: Answer) => `${r.status} ${r.headers.get("sluice-decision")} ${r.text.slice(0, 400)}`;
/** Everything a client saw of an answer: status line aside, its headers and body. */
const seen = (r: Answer) => `${JSON.stringify([...r.headers])}\n${r.text}`;

/** A Worker whose home Redis is `url` with `token`, its log lines (standard output and error) kept in `logs`. */
function misconfigured(url: string, token: string): { mf: Miniflare; logs: string[] } {
  const logs: string[] = [];
  const keep = (text: string) => logs.push(...text.split("\n").filter((line) => line.trim() !== ""));
  const mf = rig.worker({
    sluice: SLUICE,
    redisRestUrl: undefined,
    bindings: {
      SLUICE_ADMIN_TOKEN: ADMIN,
      SLUICE_JWT_SECRET: JWT_SECRET,
      UPSTASH_REDIS_REST_URL: url,
      UPSTASH_REDIS_REST_TOKEN: token,
    },
    stdout: keep,
    stderr: keep,
  });
  return { mf, logs };
}

const bridgePort = () => new URL(rig.stack.bridge.url).port;

const CASES = [
  {
    what: "a token the database refuses (401)",
    variable: "UPSTASH_REDIS_REST_TOKEN",
    url: () => rig.stack.bridge.url,
    token: "wr0ng-t0ken-s3cret-0123456789",
    secrets: ["wr0ng-t0ken-s3cret-0123456789"],
  },
  {
    what: "a URL without a scheme",
    variable: "UPSTASH_REDIS_REST_URL",
    url: () => `127.0.0.1:${bridgePort()}`,
    token: TOKEN,
    secrets: [TOKEN],
  },
  {
    what: "the rediss:// URL of the Upstash console",
    variable: "UPSTASH_REDIS_REST_URL",
    url: () => `rediss://default:pa55w0rd-s3cret@127.0.0.1:${bridgePort()}`,
    token: TOKEN,
    secrets: [TOKEN, "pa55w0rd-s3cret"],
  },
] as const;

describe.each(CASES)("4. $what is a configuration error, not an outage", (c) => {
  let mf: Miniflare;
  let logs: string[];
  const answers: Answer[] = [];
  beforeAll(async () => {
    ({ mf, logs } = misconfigured(c.url(), c.token));
    await mf.ready;
  });

  it(`a limited route answers the 500 problem naming ${c.variable}, never on_store_error's degraded answer`, async () => {
    for (let i = 0; i < 3; i++) {
      const r = await call(mf, "/limited", { ip: "198.51.100.4" });
      answers.push(r);
      expect(r.status, show(r)).toBe(500);
      expect(r.headers.get("sluice-decision"), show(r)).toBe("reject");
      expect(r.headers.get("content-type")).toBe("application/problem+json");
      expect(r.json()).toMatchObject({
        type: "/__sluice/problems/redis-not-configured",
        variable: c.variable,
        detail: expect.stringContaining(c.variable),
      });
    }
  });

  it("so does a guarded route (idempotency), where an outage is a 503", async () => {
    const r = await call(mf, "/pay", {
      method: "POST",
      ip: "198.51.100.4",
      body: "{}",
      headers: { "content-type": "application/json", "idempotency-key": "k-1" },
    });
    answers.push(r);
    expect(r.status, show(r)).toBe(500);
    expect(r.json()).toMatchObject({ variable: c.variable });
  });

  it(`health, asked with the admin token, says the store is misconfigured and names ${c.variable}`, async () => {
    const r = await call(mf, "/__sluice/health", { headers: { authorization: `Bearer ${ADMIN}` } });
    answers.push(r);
    expect(r.status, show(r)).toBe(503);
    const [home] = r.json().regions as Array<Record<string, unknown>>;
    expect(home).toMatchObject({ reachable: false, misconfigured: c.variable });
    expect(home?.error).toContain(c.variable);
  });

  it("the log says it once per isolate, naming the variable; no log line and no answer carries a secret", async () => {
    // the lines are written as the requests are answered; wait for the one that names it (generous cap)
    for (let i = 0; i < 100 && !logs.some((l) => l.includes("redis_misconfigured")); i++)
      await new Promise((r) => setTimeout(r, 50));
    const told = logs.filter((l) => l.includes('"event":"redis_misconfigured"'));
    expect(told, logs.join("\n")).toHaveLength(1);
    expect(told[0]).toContain(c.variable);
    expect(answers.length).toBeGreaterThan(0);
    for (const secret of c.secrets) {
      for (const line of logs) expect(line).not.toContain(secret);
      for (const r of answers) expect(seen(r)).not.toContain(secret);
    }
  });
});

describe("4. limiter() in the app's own code", () => {
  it("a token the database refuses is a ConfigError naming the variable, not a degraded answer", async () => {
    const calls = limiter({
      name: "jobs",
      limits: [{ name: "per-user", rate: 10, period: "1m" }],
      runtime: new Runtime(),
    });
    const env = { UPSTASH_REDIS_REST_URL: rig.stack.bridge.url, UPSTASH_REDIS_REST_TOKEN: "wr0ng-t0ken-s3cret" };
    const refused = await calls.limit({ env }, "user-1").catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as ConfigError).field).toBe("env.UPSTASH_REDIS_REST_TOKEN");
    expect((refused as ConfigError).message).not.toContain("wr0ng-t0ken-s3cret");
  });

  it("so is a redis option whose URL is not REST, naming the option", async () => {
    const calls = limiter({
      limits: [{ name: "per-user", rate: 10, period: "1m" }],
      runtime: new Runtime(),
      redis: () => ({ url: "rediss://default:pa55w0rd-s3cret@eu1.example.io:6379", token: TOKEN }),
    });
    const refused = await calls.limit({ env: {} }, "user-1").catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as ConfigError).field).toBe("limiter(): redis.url");
    expect((refused as ConfigError).message).not.toContain("pa55w0rd-s3cret");
  });
});

describe("4. a bearer token that does not verify", () => {
  it("is a 401 with a fixed detail that never quotes the token", async () => {
    const forged = await sign({ sub: "mallory-0123456789", exp: Math.floor(Date.now() / 1000) + 600 }, "not-the-key");
    for (const token of [forged, "not.a.jwt-s3cret-0123456789"]) {
      const r = await call(rig.mf, "/mine", { headers: { authorization: `Bearer ${token}` } });
      expect(r.status, show(r)).toBe(401);
      expect(r.json().detail).toMatch(/^the bearer token did not verify/);
      expect(seen(r)).not.toContain(token);
      expect(seen(r)).not.toContain(token.split(".").at(-1));
    }
  });
});
