/**
 * Security regression (finding 18 of issue 29): a Redis that refuses `TIME` inside scripts stopped
 * every decision. Every script read `redis.call('TIME')`; ElastiCache Serverless (and other
 * managed Redis) answer it with "ERR This Redis command is not allowed from script", so every
 * decision fell into `on_store_error` (here `closed`: `503` on every guarded route) and nothing
 * said why. Here the bridge plays such a Redis (its `scriptTime: "refuse"` mode: the real Redis
 * raises that very error at the script's TIME line). The store now detects the refusal, confirms
 * it by sending the same call on the isolate's clock, and from then on passes the isolate's clock,
 * held monotone per key in the scripts: limits decide exactly, idempotency and sessions work with
 * rising fences, health says the clock, and the log says so once.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, type DemoOrigin, useStack } from "../integration/stack.js";

const ADMIN = "time-refused-admin-token";
const HOUR_MS = 3_600_000;
const SLUICE: SluiceInput = {
  key_prefix: "tr",
  timeout_ms: 2_000,
  // a store failure refuses (503): what every guarded route answered on main
  on_store_error: "closed",
  routes: [
    {
      name: "limited",
      match: "/limited",
      methods: ["GET"],
      limits: [{ name: "per-ip", key: "ip", rate: 1, period: "1h", burst: 3 }],
    },
    { name: "pay", match: "/pay", methods: ["POST"], idempotency: { ttl: "1h" } },
    { name: "tools", match: "/tools", methods: ["POST"], session: { key: "header:x-session-id" } },
  ],
};

const rig = useStack({ scriptTime: "refuse" });
let origin: DemoOrigin;
let mf: Miniflare;
const logs: string[] = [];
beforeAll(async () => {
  origin = rig.origin;
  mf = rig.worker({
    sluice: SLUICE,
    bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
    stdout: (text) => logs.push(...text.split("\n").filter((line) => line.trim() !== "")),
  });
  await mf.ready;
});

type Answer = Awaited<ReturnType<typeof call>>;
const show = (r: Answer) => `${r.status} ${r.headers.get("sluice-decision")} ${r.text.slice(0, 300)}`;
const post = (path: string, headers: Record<string, string>) =>
  call(mf, path, {
    method: "POST",
    ip: "203.0.113.90",
    body: "{}",
    headers: { "content-type": "application/json", ...headers },
  });
/** Requests to Redis that carried a script. */
const scriptRequests = () => {
  const c = rig.stack.bridge.counts();
  return (c.requestsWith.evalsha ?? 0) + (c.requestsWith.eval ?? 0);
};

describe("18. a Redis that refuses TIME in scripts", () => {
  it("the bridge refuses TIME in a script as ElastiCache Serverless does, at the call's line", async () => {
    const script = "#!lua flags=allow-key-locking\nlocal x = 1\nlocal t = redis.call('TIME')\nreturn t[1]";
    await expect(rig.redis.eval(script, ["k"], [])).rejects.toThrow(
      /ERR This Redis command is not allowed from script script: [0-9a-f]{40}, on @user_script:3\./,
    );
  });

  it("a token bucket admits its burst, then refuses with the Retry-After of the real bucket", async () => {
    const started = Date.now();
    const answers: Answer[] = [];
    for (let i = 0; i < 4; i++) answers.push(await call(mf, "/limited", { ip: "198.51.100.7" }));
    const elapsed = Date.now() - started;
    for (const r of answers.slice(0, 3)) {
      expect(r.status, show(r)).toBe(200);
      expect(r.headers.get("sluice-decision")).toBe("allow");
    }
    const refused = answers[3] as Answer;
    expect(refused.status, show(refused)).toBe(429);
    expect(refused.headers.get("sluice-decision")).toBe("reject");
    // one token an hour, the first taken within `elapsed` of the refusal: due an hour after it
    const retryMs = refused.json().retry_after_ms as number;
    expect(retryMs).toBeLessThanOrEqual(HOUR_MS);
    expect(retryMs).toBeGreaterThanOrEqual(HOUR_MS - elapsed);
    expect(Number(refused.headers.get("retry-after"))).toBe(Math.ceil(retryMs / 1000));
    // another client's bucket is its own
    expect((await call(mf, "/limited", { ip: "198.51.100.8" })).status).toBe(200);
  });

  it("idempotency: the first call is forwarded with a fencing token, a duplicate replays, the next key's token is higher", async () => {
    const first = await post("/pay", { "idempotency-key": "order-1" });
    expect(first.status, show(first)).toBe(200);
    const firstToken = Number(origin.seen.at(-1)?.headers["sluice-fencing-token"]);
    expect(Number.isSafeInteger(firstToken) && firstToken > 0).toBe(true);
    let again = await post("/pay", { "idempotency-key": "order-1" });
    // the answer is stored after the response: a duplicate may still find the key in flight
    for (let i = 0; i < 40 && again.status === 409; i++) {
      await new Promise((r) => setTimeout(r, 100));
      again = await post("/pay", { "idempotency-key": "order-1" });
    }
    expect(again.status, show(again)).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    const second = await post("/pay", { "idempotency-key": "order-2" });
    expect(second.status, show(second)).toBe(200);
    expect(Number(origin.seen.at(-1)?.headers["sluice-fencing-token"])).toBeGreaterThan(firstToken);
  });

  it("sessions: each call of a session takes the lock with a higher fencing token", async () => {
    const tokens: number[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await post("/tools", { "x-session-id": "agent-7" });
      expect(r.status, show(r)).toBe(200);
      tokens.push(Number(origin.seen.at(-1)?.headers["sluice-fencing-token"]));
    }
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as number);
  });

  it("health says the store runs on the isolate's clock, and why", async () => {
    const r = await call(mf, "/__sluice/health", { headers: { authorization: `Bearer ${ADMIN}` } });
    expect(r.status, r.text).toBe(200);
    expect(r.json()).toMatchObject({
      ok: true,
      regions: [
        {
          reachable: true,
          clock: { mode: "isolate", refusal: expect.stringMatching(/not allowed from script/) as unknown },
        },
      ],
    });
  });

  it("the switch is logged once, and TIME is not tried again on every call: one request per decision", async () => {
    const before = scriptRequests();
    for (let i = 0; i < 5; i++) expect((await call(mf, "/limited", { ip: `198.51.100.${20 + i}` })).status).toBe(200);
    expect(scriptRequests() - before).toBe(5);
    const switches = logs.filter((line) => line.includes('"event":"store_clock"'));
    expect(switches).toHaveLength(1);
    expect(JSON.parse(switches[0] as string)).toMatchObject({ clock: "isolate", store: expect.any(String) as unknown });
  });
});
