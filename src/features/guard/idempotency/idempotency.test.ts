import { Hono, type Context } from "hono";
import { describe, expect, it } from "vitest";
import { flushedTotals } from "../../../../test/support/flushed-totals.js";
import { background, countedApp, gate, middlewareRig } from "../../../../test/support/middleware-rig.js";
import { idempotency, type IdempotencyOptions, type SluiceEnv } from "../../../index.js";
import type { MetricsBuffer } from "../../../metrics/index.js";
import { asHash } from "../../../store/replies.js";

/** idempotency() in an app of its own, in Node, against a real Redis behind the Upstash-REST bridge. */
const rig = middlewareRig("idem");
const options = (extra: IdempotencyOptions = {}): IdempotencyOptions => rig.options(extra);

/** The all-time counts of `prefix`: those flushed to Redis, and those `metrics` still holds, by field. */
async function totals(metrics: MetricsBuffer, prefix: string): Promise<Record<string, number>> {
  const total: Record<string, number> = {};
  for (const [field, n] of Object.entries(asHash(await rig.db.redis.hgetall(`${prefix}:metrics:total`))))
    total[field] = Number(n);
  for (const [field, n] of Object.entries(await flushedTotals(metrics))) total[field] = (total[field] ?? 0) + n;
  return total;
}

interface Created {
  n: number;
  got: unknown;
  fence?: string;
  key?: string;
}

const IP = "198.51.100.20";
const post = (key: string | undefined, body: string, ip = IP): RequestInit => ({
  method: "POST",
  body,
  headers: {
    "CF-Connecting-IP": ip,
    "content-type": "application/json",
    ...(key === undefined ? {} : { "Idempotency-Key": key }),
  },
});

/** An app whose POST /orders reads the JSON body and answers 201 with what it saw; `calls` counts its runs. */
function ordersApp(opts: IdempotencyOptions, before?: () => Promise<void>) {
  return countedApp(
    idempotency(opts),
    async (c, n) => {
      await before?.();
      const got: unknown = c.req.method === "POST" ? await c.req.json() : null;
      const { fencingToken, idempotencyKey } = c.get("sluice");
      return c.json({ n, got, fence: fencingToken, key: idempotencyKey } satisfies Created, 201);
    },
    { path: "/orders", method: ["GET", "POST"] },
  );
}

describe("idempotency()", () => {
  it("runs the handler once per key; the duplicate gets the stored answer, replayed", async () => {
    const { app, calls } = ordersApp(options());
    const bg = background();
    const first = await app.request("/orders", post("order-1", '{"sku":"a","qty":1}'), {}, bg.ctx);
    expect(first.status).toBe(201);
    expect(first.headers.get("Sluice-Decision")).toBe("allow");
    expect(first.headers.get("Idempotent-Replayed")).toBeNull();
    const firstText = await first.text();
    const created = JSON.parse(firstText) as Created;
    // the handler read the body the middleware had already read to fingerprint it
    expect(created.got).toEqual({ sku: "a", qty: 1 });
    expect(created.key).toBe("order-1");
    expect(Number(created.fence)).toBeGreaterThan(0);
    await bg.settled();

    const again = background();
    const replay = await app.request("/orders", post("order-1", '{"sku":"a","qty":1}'), {}, again.ctx);
    expect(replay.status).toBe(201);
    expect(await replay.text()).toBe(firstText);
    expect(replay.headers.get("Idempotent-Replayed")).toBe("true");
    expect(replay.headers.get("Sluice-Decision")).toBe("replay");
    expect(replay.headers.get("content-type")).toMatch(/^application\/json/);
    expect(calls.n).toBe(1);
  });

  it("gives every new key a higher fencing token", async () => {
    const { app } = ordersApp(options());
    const fences: number[] = [];
    for (const key of ["f-1", "f-2", "f-3"]) {
      const res = await app.request("/orders", post(key, "{}"));
      expect(res.status).toBe(201);
      fences.push(Number(((await res.json()) as Created).fence));
    }
    expect(fences[1]).toBeGreaterThan(fences[0] ?? Infinity);
    expect(fences[2]).toBeGreaterThan(fences[1] ?? Infinity);
  });

  it("answers a duplicate of a request still in flight with 409 and Retry-After", async () => {
    const g = gate();
    const { app, calls } = ordersApp(options(), g.wait);
    const first = app.request("/orders", post("slow-1", '{"a":1}'));
    await g.reached();
    const dup = await app.request("/orders", post("slow-1", '{"a":1}'));
    expect(dup.status).toBe(409);
    expect(dup.headers.get("content-type")).toBe("application/problem+json");
    expect(dup.headers.get("Retry-After")).toBe("1");
    expect(dup.headers.get("Sluice-Decision")).toBe("reject");
    expect(((await dup.json()) as { title: string }).title).toBe("Request in flight");
    g.open();
    expect((await first).status).toBe(201);
    expect(calls.n).toBe(1);
  });

  it("refuses the same key with another body with 422", async () => {
    const { app, calls } = ordersApp(options());
    const bg = background();
    const first = await app.request("/orders", post("reuse-1", '{"amount":1}'), {}, bg.ctx);
    expect(first.status).toBe(201);
    await first.text();
    await bg.settled();
    const other = await app.request("/orders", post("reuse-1", '{"amount":1000}'));
    expect(other.status).toBe(422);
    expect(((await other.json()) as { title: string }).title).toBe("Idempotency-Key reused");
    expect(calls.n).toBe(1);
  });

  it("with required = true, refuses a request without a key with 400", async () => {
    const { app, calls } = ordersApp(options({ required: true }));
    const res = await app.request("/orders", post(undefined, '{"a":1}'));
    expect(res.status).toBe(400);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(((await res.json()) as { title: string }).title).toBe("Idempotency-Key required");
    expect(calls.n).toBe(0);
  });

  it("says, refusing a missing key, the method and path the client used and the route by name (issue 30, point 10)", async () => {
    const { app } = ordersApp(options({ required: true }));
    const res = await app.request("/orders?page=2", post(undefined, '{"a":1}'));
    expect(res.status).toBe(400);
    // the route's name alone ("POST app needs …") told a client nothing it sent
    expect(((await res.json()) as { detail: string }).detail).toBe(
      'POST /orders needs an Idempotency-Key header (route "app")',
    );
  });

  it("lets a request without a key through unguarded when keys are optional", async () => {
    const { app, calls } = ordersApp(options());
    expect((await app.request("/orders", post(undefined, '{"a":1}'))).status).toBe(201);
    expect((await app.request("/orders", post(undefined, '{"a":1}'))).status).toBe(201);
    expect(calls.n).toBe(2);
  });

  it("frees the key when the handler throws, so the retry runs the handler again", async () => {
    const { app, calls } = countedApp(
      idempotency(options()),
      (c, n) => {
        if (n === 1) throw new Error("payment provider exploded");
        return c.json({ paid: true }, 201);
      },
      { path: "/pay", method: "POST" },
    );
    app.onError((_e, c) => c.text("handler failed", 500));
    const bg = background();
    const failed = await app.request("/pay", post("pay-1", '{"eur":5}'), {}, bg.ctx);
    expect(failed.status).toBe(500);
    await failed.text();
    await bg.settled();
    const retry = await app.request("/pay", post("pay-1", '{"eur":5}'));
    expect(retry.status).toBe(201);
    expect(retry.headers.get("Idempotent-Replayed")).toBeNull();
    expect(calls.n).toBe(2);
  });

  it('holds the key as indeterminate when the handler answers 5xx under on_origin_error = "hold"', async () => {
    const { app, calls } = countedApp(
      idempotency(options({ on_origin_error: "hold" })),
      (c) => c.text("upstream timeout", 502),
      { path: "/pay", method: "POST" },
    );
    const bg = background();
    const failed = await app.request("/pay", post("hold-1", '{"eur":5}'), {}, bg.ctx);
    expect(failed.status).toBe(502);
    await failed.text();
    await bg.settled();
    const retry = await app.request("/pay", post("hold-1", '{"eur":5}'));
    expect(retry.status).toBe(409);
    expect(retry.headers.get("Retry-After")).toBe("60");
    expect(((await retry.json()) as { title: string }).title).toBe("Outcome indeterminate");
    expect(calls.n).toBe(1);
  });

  it("counts a 409 and a 422 as idempotency outcomes, not as a limit's reject", async () => {
    const g = gate();
    const opts = options();
    const { app } = ordersApp(opts, g.wait);
    const bg = background();
    const first = app.request("/orders", post("count-1", '{"a":1}'), {}, bg.ctx);
    await g.reached();
    const [dup, other] = [background(), background()];
    expect((await app.request("/orders", post("count-1", '{"a":1}'), {}, dup.ctx)).status).toBe(409);
    g.open();
    await (await first).text();
    await bg.settled();
    expect((await app.request("/orders", post("count-1", '{"a":2}'), {}, other.ctx)).status).toBe(422);
    await Promise.all([dup.settled(), other.settled()]);
    // the first decision's flush went to Redis; the rest is still in the isolate's buffer
    const fields = await totals(opts.runtime!.metrics, opts.key_prefix!);
    const outcomes = Object.entries(fields).filter(([f]) => f.startsWith("idem:"));
    expect(outcomes.map(([f, n]) => `${f.slice(f.indexOf("|") + 1)} ${n}`).sort()).toEqual([
      "first 1",
      "in_flight 1",
      "mismatch 1",
    ]);
    expect(Object.keys(fields).filter((f) => f.endsWith("|reject"))).toEqual([]);
    expect(fields[Object.keys(fields).find((f) => f.startsWith("idem_first:") && f.endsWith("|count")) ?? ""]).toBe(1);
  });

  it("lets methods it does not guard (GET) through to the handler", async () => {
    const { app, calls } = ordersApp(options());
    const res = await app.request("/orders", { headers: { "CF-Connecting-IP": IP, "Idempotency-Key": "read-1" } });
    expect(res.status).toBe(201);
    expect(((await res.json()) as Created).got).toBeNull();
    expect(calls.n).toBe(1);
  });
});

describe("idempotency() principals and derived keys", () => {
  const SECRET = "idem-mw-hmac-secret-0123456789abcdef";
  const from = (ip: string, key: string | undefined, body: string, authorization?: string): RequestInit => {
    const init = post(key, body, ip);
    return {
      ...init,
      headers: { ...(init.headers as Record<string, string>), ...(authorization ? { authorization } : {}) },
    };
  };

  it("scopes keys to the caller's credential by default, across client addresses", async () => {
    const { app, calls } = ordersApp(options());
    const bg = background();
    const first = await app.request("/orders", from("198.51.100.31", "mw-1", "{}", "Bearer k-one"), {}, bg.ctx);
    const firstText = await first.text();
    await bg.settled();
    const moved = await app.request("/orders", from("203.0.113.31", "mw-1", "{}", "Bearer k-one"));
    expect(moved.headers.get("Idempotent-Replayed")).toBe("true");
    expect(await moved.text()).toBe(firstText);
    const other = await app.request("/orders", from("203.0.113.31", "mw-1", "{}", "Bearer k-two"), {}, bg.ctx);
    expect(other.headers.get("Idempotent-Replayed")).toBeNull();
    await other.text();
    await bg.settled();
    expect(calls.n).toBe(2);
  });

  it("with a jwt option, the principal is the verified token's sub (a refreshed token is the same caller)", async () => {
    const { sign } = await import("hono/jwt");
    const exp = Math.floor(Date.now() / 1000) + 3_600;
    const token = async (claims: Record<string, unknown>) =>
      `Bearer ${await sign({ exp, ...claims }, SECRET, "HS256")}`;
    const { app, calls } = ordersApp(options({ jwt: { secret_env: "MW_JWT_SECRET" } }));
    const env = { MW_JWT_SECRET: SECRET };
    const bg = background();
    const first = await app.request(
      "/orders",
      from("198.51.100.32", "mw-2", "{}", await token({ sub: "ann" })),
      env,
      bg.ctx,
    );
    await first.text();
    await bg.settled();
    const refreshed = await token({ sub: "ann", jti: "2" });
    const again = await app.request("/orders", from("203.0.113.32", "mw-2", "{}", refreshed), env);
    expect(again.headers.get("Idempotent-Replayed")).toBe("true");
    expect(calls.n).toBe(1);
  });

  it("takes the principal from a function of the context: the app's own auth, hashed into the key", async () => {
    const opts = options({ principal: (c: Context) => c.get("user") as string | undefined });
    // the app's own auth: an API key names the user; sluice reads the user the app set
    const users: Record<string, string> = { "key-ann": "user-ann", "key-bob": "user-bob" };
    const app = new Hono<SluiceEnv>();
    const calls: string[] = [];
    app.use("/orders", async (c, next) => {
      const user = users[c.req.header("x-api-key") ?? ""];
      if (user) c.set("user" as never, user as never);
      await next();
    });
    app.use("/orders", idempotency(opts));
    app.post("/orders", (c) => {
      calls.push(c.get("user" as never));
      return c.json({ n: calls.length }, 201);
    });
    const as = (apiKey: string, ip: string) => {
      const init = post("same-key", "{}", ip);
      return { ...init, headers: { ...(init.headers as Record<string, string>), "x-api-key": apiKey } };
    };
    const bg = background();
    for (const [apiKey, ip] of [
      ["key-ann", "198.51.100.41"],
      ["key-bob", "198.51.100.41"],
    ] as const) {
      const res = await app.request("/orders", as(apiKey, ip), {}, bg.ctx);
      expect(res.headers.get("Idempotent-Replayed")).toBeNull();
      await res.text();
    }
    await bg.settled();
    // each user's duplicate (from another address: the principal is the user, not the IP) is a replay
    for (const [apiKey, n] of [
      ["key-ann", 1],
      ["key-bob", 2],
    ] as const) {
      const again = await app.request("/orders", as(apiKey, "203.0.113.41"));
      expect(again.headers.get("Idempotent-Replayed")).toBe("true");
      expect(await again.json()).toEqual({ n });
    }
    expect(calls).toEqual(["user-ann", "user-bob"]);
    const keys = (await rig.db.redis.keys(`${opts.key_prefix}:*`)) as string[];
    expect(keys.filter((k) => k.startsWith(`${opts.key_prefix}:idem:app:`)).length).toBeGreaterThanOrEqual(2);
    expect(keys.join(" ")).not.toMatch(/user-|key-ann|key-bob/);
  });

  it("derives the key from body fields, whatever Idempotency-Key comes, and names a missing field", async () => {
    const { app, calls } = ordersApp(options({ derive: { fields: ["/user", "/sku"], window: "1m" } }));
    const bg = background();
    const first = await app.request("/orders", post("a-1", '{"user":"u","sku":"s","n":1}'), {}, bg.ctx);
    const firstText = await first.text();
    await bg.settled();
    const retry = await app.request("/orders", post("a-2", '{"sku":"s","user":"u","n":2}'));
    expect(retry.headers.get("Idempotent-Replayed")).toBe("true");
    expect(await retry.text()).toBe(firstText);
    const missing = await app.request("/orders", post(undefined, '{"user":"u"}'));
    expect(missing.status).toBe(400);
    expect(await missing.json()).toMatchObject({ title: "Idempotency fields missing", field: "/sku" });
    expect(calls.n).toBe(1);
  });
});
