/**
 * Security regressions of idempotency: a queue route must not turn one key into two side effects,
 * the fingerprint must cover the query, and derived keys must be scoped by path.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, type DemoOrigin, useStack } from "../integration/stack.js";

const SLUICE: SluiceInput = {
  key_prefix: "si",
  timeout_ms: 2_000,
  routes: [
    {
      name: "sms",
      match: "/sms",
      methods: ["POST"],
      on_limit: "queue",
      limits: [{ name: "provider", key: "global", rate: 1, period: "2s", burst: 1 }],
      idempotency: {},
    },
    { name: "pay", match: "/pay", methods: ["POST"], idempotency: {} },
    { name: "charge", match: "/charge/*", methods: ["POST"], idempotency: { derive: true } },
  ],
};

const rig = useStack({ sluice: SLUICE, queues: true });
let origin: DemoOrigin;
let mf: Miniflare;
beforeAll(() => {
  ({ origin, mf } = rig);
});

type Answer = Awaited<ReturnType<typeof call>>;
const post = (path: string, key: string | undefined, body: string, ip = "203.0.113.40") =>
  call(mf, path, {
    method: "POST",
    ip,
    body,
    headers: { "content-type": "application/json", ...(key === undefined ? {} : { "idempotency-key": key }) },
  });
const show = (r: Answer) =>
  `${r.status} ${r.headers.get("sluice-decision")} replayed=${r.headers.get("idempotent-replayed")} ${r.text.slice(0, 300)}`;
/** The answer is stored after the response: ask again while the key is still in flight. */
async function untilSettled(send: () => Promise<Answer>): Promise<Answer> {
  let r = await send();
  for (let i = 0; i < 40 && r.status === 409; i++) {
    await sleep(100);
    r = await send();
  }
  return r;
}

describe("2. queue routes with idempotency", () => {
  it("one Idempotency-Key is queued once, delivered once with its fencing token, then replayed", async () => {
    const body = JSON.stringify({ to: "+15550100", text: "sms-1: your code is 4711" });
    const exhaust = await post(
      "/sms?status=201",
      undefined,
      JSON.stringify({ to: "+15550199", text: "spend the token" }),
    );
    expect(exhaust.headers.get("sluice-decision"), show(exhaust)).toBe("allow");

    const first = await post("/sms?status=201", "sms-1", body);
    expect(first.status, show(first)).toBe(202);
    expect(first.headers.get("sluice-decision")).toBe("queued");
    const second = await post("/sms?status=201", "sms-1", body);
    expect(second.status, `a duplicate of a queued key must be a 409, not another job: ${show(second)}`).toBe(409);

    const deliveries = () => origin.seen.filter((s) => s.path === "/sms" && s.body === body);
    const location = first.headers.get("location") as string;
    let status: Record<string, unknown> = {};
    for (
      let i = 0;
      i < 100 && (deliveries().length === 0 || status.status === "queued" || status.status === undefined);
      i++
    ) {
      await sleep(100);
      const s = await call(mf, location);
      if (s.status === 200) status = s.json();
    }
    expect(deliveries().length, `never delivered (job status ${JSON.stringify(status)})`).toBeGreaterThanOrEqual(1);
    await sleep(3_000); // a second job, had there been one, is delivered within the next 2 s bucket
    const seen = deliveries();
    expect(seen, "the origin must see sms-1 exactly once").toHaveLength(1);
    expect(Number(seen[0]!.headers["sluice-fencing-token"]), "the delivery must carry a fencing token").toBeGreaterThan(
      0,
    );
    expect(seen[0]!.headers["idempotency-key"]).toBe("sms-1");

    const third = await untilSettled(() => post("/sms?status=201", "sms-1", body));
    expect(third.headers.get("idempotent-replayed"), `after delivery the key replays: ${show(third)}`).toBe("true");
    expect(third.status).toBe(201);
    expect(third.json()).toMatchObject({
      origin: "demo",
      method: "POST",
      path: "/sms",
      body,
      hit: origin.seen.indexOf(seen[0]!) + 1,
    });
    expect(deliveries()).toHaveLength(1);

    const other = await post("/sms?status=201", "sms-1", JSON.stringify({ to: "+15550100", text: "something else" }));
    expect(other.status, `same key, other body: ${show(other)}`).toBe(422);
  }, 60_000);
});

describe("7. the fingerprint covers the query; derived keys are scoped by path", () => {
  it("the same key with another query is a 422, and a derived key never replays one path's answer on another", async () => {
    const small = await post("/pay?amount=1", "pay-1", "{}");
    expect(small.status, show(small)).toBe(200);
    // wait until the answer is stored, so the next request meets a completed record
    const stored = await untilSettled(() => post("/pay?amount=1", "pay-1", "{}"));
    expect(stored.headers.get("idempotent-replayed"), show(stored)).toBe("true");
    const large = await post("/pay?amount=1000", "pay-1", "{}");
    expect(large.status, `?amount=1000 with the key of ?amount=1 must be refused, not replayed: ${show(large)}`).toBe(
      422,
    );
    expect(large.headers.get("idempotent-replayed")).toBeNull();

    const body = JSON.stringify({ amount: 5, currency: "EUR" });
    const a = await post("/charge/a", undefined, body, "203.0.113.41");
    expect(a.status, show(a)).toBe(200);
    expect(a.headers.get("idempotent-replayed")).toBeNull();
    const aAgain = await untilSettled(() => post("/charge/a", undefined, body, "203.0.113.41"));
    expect(aAgain.headers.get("idempotent-replayed"), `repeating /charge/a replays: ${show(aAgain)}`).toBe("true");
    const b = await post("/charge/b", undefined, body, "203.0.113.41");
    expect(b.status, `/charge/b is another request than /charge/a: ${show(b)}`).toBe(200);
    expect(b.headers.get("idempotent-replayed")).toBeNull();
    expect(b.json()).toMatchObject({ path: "/charge/b" });
    expect(origin.seen.filter((s) => s.path.startsWith("/charge/")).map((s) => s.path)).toEqual([
      "/charge/a",
      "/charge/b",
    ]);
  });
});
