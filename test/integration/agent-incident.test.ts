/**
 * The incident sluice's idempotency exists for: an agent calls `create_order`, the origin creates
 * the order but answers late, the agent times out and retries. Under the defaults of an
 * idempotent route, every retry must end in the one order: a timeout or a dropped connection is an
 * unknown outcome, never a free retry; a live call's claim is never taken over.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { until } from "../support/pace.js";
import { call, sleep, useStack } from "./stack.js";

const SLUICE: SluiceInput = {
  key_prefix: "ai",
  timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
  routes: [
    { name: "orders", match: "/orders/create", methods: ["POST"], origin_timeout: "1s", idempotency: {} },
    { name: "long", match: "/orders/long", methods: ["POST"], idempotency: { lease: "1s" } },
    {
      name: "chaos",
      match: "/chaos/*",
      methods: ["POST"],
      // the cron asks about keys indeterminate for longer than this: any key, by the time it runs
      idempotency: { reconcile: "/chaos-orders/{key}", reconcile_after: "1ms" },
    },
    {
      name: "queued",
      match: "/queued/create",
      methods: ["POST"],
      origin_timeout: "1s",
      on_limit: "queue",
      // one token per 5 s: the order sent right after the one that took it is queued, whatever the machine's pace
      limits: [{ name: "provider", key: "global", rate: 1, period: "5s", burst: 1 }],
      idempotency: {},
    },
  ],
};

/** Paths under /chaos/ whose connection the origin drops after creating the order: 3 keys in 10 (scripted by the key's hash, not drawn). */
const dropped = (key: string) => [...key].reduce((h, ch) => (h * 31 + ch.charCodeAt(0)) % 1_000_003, 7) % 10 < 3;

/** How long the origin takes over /queued/create once released: more than its origin_timeout (1 s), however busy the machine (a timer fires late, never early). */
const QUEUED_ANSWER_MS = 1_500;

/**
 * A loopback origin that creates an order for every request it reads (counted per
 * Idempotency-Key) before it answers. /orders/create, /orders/long and /queued/create are held
 * unanswered until the test releases their key (`release`), so a timeout and a duplicate while
 * the origin works happen in that order whatever the machine's pace; once released, /queued/create
 * answers QUEUED_ANSWER_MS later. Under /chaos/ it answers at once, or drops the connection without
 * an answer for the keys `dropped` names. Its reconcile endpoint, `GET /chaos-orders/{key}`,
 * answers 503 until `canAnswer`, then 200 with the key's order or 404.
 */
interface OrderOrigin {
  url: string;
  orders: Map<string, number>;
  /** Lets the held requests of `key` (and those to come) be answered. */
  release(key: string, afterMs?: number): void;
  /** The reconcile endpoint answers (else 503). */
  canAnswer: boolean;
  close(): Promise<void>;
}

async function startOrderOrigin(): Promise<OrderOrigin> {
  const orders = new Map<string, number>();
  const reconcile = (res: ServerResponse, key: string) => {
    const found = origin.canAnswer && orders.has(key);
    res.writeHead(origin.canAnswer ? (found ? 200 : 404) : 503, { "content-type": "application/json" });
    res.end(found ? JSON.stringify({ order: `ord-${key}-1` }) : "{}");
  };
  const released = new Map<string, number>();
  const held = new Map<string, Array<() => void>>();
  const whenReleased = (key: string, answer: () => void) => {
    const afterMs = released.get(key);
    if (afterMs !== undefined) setTimeout(answer, afterMs);
    else held.set(key, [...(held.get(key) ?? []), answer]);
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on("end", () => {
      const asked = /^\/chaos-orders\/(.+)$/.exec(req.url ?? "");
      if (req.method === "GET" && asked) return reconcile(res, decodeURIComponent(asked[1] ?? ""));
      const key = String(req.headers["idempotency-key"] ?? "-");
      const n = (orders.get(key) ?? 0) + 1;
      orders.set(key, n);
      const path = new URL(req.url ?? "/", "http://origin").pathname;
      if (path.startsWith("/chaos/") && dropped(key)) return req.socket.destroy();
      const answer = () => {
        res.writeHead(201, { "content-type": "application/json" });
        res.end(JSON.stringify({ order: `ord-${key}-${n}` }));
      };
      if (path.startsWith("/chaos/")) answer();
      else whenReleased(key, answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin: OrderOrigin = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    orders,
    release(key, afterMs = 0) {
      released.set(key, afterMs);
      for (const answer of held.get(key) ?? []) setTimeout(answer, afterMs);
      held.delete(key);
    },
    canAnswer: false,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  return origin;
}

const rig = useStack({ sluice: SLUICE, instances: 2, queues: true, origin: startOrderOrigin });
let origin: OrderOrigin;
let isolate: readonly Miniflare[];
beforeAll(() => {
  origin = rig.origin;
  isolate = rig.workers;
});

type Answer = Awaited<ReturnType<typeof call>>;
const createOrder = (w: Miniflare, path: string, key: string) =>
  call(w, path, {
    method: "POST",
    ip: "203.0.113.77",
    body: JSON.stringify({ user: "u-1", sku: "sku-9", amount: 42 }),
    headers: { "content-type": "application/json", "idempotency-key": key },
  });
const show = (r: Answer) => `${r.status} ${r.headers.get("sluice-decision")} ${r.text.slice(0, 200)}`;
const isInFlight = (r: Answer) => r.status === 409 && r.json().title === "Request in flight";

/** Retries (as the agent would) while the key is in flight, up to `tries`. */
async function retryWhileInFlight(send: () => Promise<Answer>, tries = 60): Promise<Answer> {
  let r = await send();
  for (let i = 0; i < tries && isInFlight(r); i++) {
    await sleep(100);
    r = await send();
  }
  return r;
}

describe("the agent's create_order, answered after origin_timeout", () => {
  it("504, then 409 while the answer is awaited, then the late answer replayed: one order", async () => {
    const first = await createOrder(isolate[0]!, "/orders/create", "order-1");
    expect(first.status, show(first)).toBe(504);
    expect(origin.orders.get("order-1")).toBe(1);

    // the agent retries at once, through another isolate: not forwarded
    const atOnce = await createOrder(isolate[1]!, "/orders/create", "order-1");
    expect(atOnce.status, show(atOnce)).toBe(409);
    expect(atOnce.json()).toMatchObject({ title: "Request in flight" });
    expect(atOnce.headers.get("retry-after")).toBe("1");

    // once the late answer is stored, retries replay it
    origin.release("order-1");
    const later = await retryWhileInFlight(() => createOrder(isolate[1]!, "/orders/create", "order-1"));
    expect(later.status, show(later)).toBe(201);
    expect(later.headers.get("idempotent-replayed")).toBe("true");
    expect(later.json()).toEqual({ order: "ord-order-1-1" });
    const again = await createOrder(isolate[0]!, "/orders/create", "order-1");
    expect([again.status, again.headers.get("idempotent-replayed"), again.text]).toEqual([201, "true", later.text]);
    expect(origin.orders.get("order-1")).toBe(1);
  });

  it("a lease shorter than the origin's run: the claim is renewed, a duplicate mid-run is refused, one order", async () => {
    const first = createOrder(isolate[0]!, "/orders/long", "long-1");
    await sleep(1_700); // past the 1 s lease, while the origin still works (until released)
    const midRun = await createOrder(isolate[1]!, "/orders/long", "long-1");
    expect(midRun.status, show(midRun)).toBe(409);
    origin.release("long-1");
    expect((await first).status).toBe(201);
    const later = await retryWhileInFlight(() => createOrder(isolate[1]!, "/orders/long", "long-1"));
    expect([later.status, later.headers.get("idempotent-replayed")]).toEqual([201, "true"]);
    expect(origin.orders.get("long-1")).toBe(1);
  });
});

describe("through the queue", () => {
  it("a queued order whose answer comes after origin_timeout is delivered once, and replayed", async () => {
    // the token is spent once the order reaches the origin, which holds it: its client gets a 504
    const spend = createOrder(isolate[0]!, "/queued/create", "q-spend");
    expect(
      await until(
        async () => origin.orders.get("q-spend"),
        (n) => n === 1,
      ),
    ).toBe(1);
    origin.release("q-1", QUEUED_ANSWER_MS);
    const queued = await createOrder(isolate[0]!, "/queued/create", "q-1");
    expect(queued.status, show(queued)).toBe(202);
    const spent = await spend;
    expect(spent.status, show(spent)).toBe(504);
    const location = queued.headers.get("location") as string;
    let status: Record<string, unknown> = {};
    for (let i = 0; i < 150 && status.status !== "delivered" && status.status !== "failed"; i++) {
      await sleep(100);
      const s = await call(isolate[0]!, location);
      if (s.status === 200) status = s.json();
    }
    expect(status, JSON.stringify(status)).toMatchObject({ status: "delivered", origin_status: 201 });
    await sleep(3_000); // a second delivery (a retry of the timed-out job) would land within this
    expect(origin.orders.get("q-1")).toBe(1);
    const retried = await retryWhileInFlight(() => createOrder(isolate[1]!, "/queued/create", "q-1"));
    expect([retried.status, retried.headers.get("idempotent-replayed")]).toEqual([201, "true"]);
    expect(retried.json()).toEqual({ order: "ord-q-1-1" });
  });
});

describe("chaos: the origin drops 3 connections in 10 after creating the order", () => {
  it("30 keys × 3 attempts over two isolates: never two orders for a key; a dropped key is indeterminate, never re-run, until the origin can say what became of it", async () => {
    const keys = Array.from({ length: 30 }, (_, i) => `chaos-${i}`);
    const attempt = (key: string, n: number) => createOrder(isolate[n % 2]!, `/chaos/${key}`, key);
    const firsts = await Promise.all(keys.map((key) => attempt(key, 0)));
    const retries: Answer[][] = [];
    for (const [i, key] of keys.entries()) {
      retries.push([
        await retryWhileInFlight(() => attempt(key, i + 1)),
        await retryWhileInFlight(() => attempt(key, i + 2)),
      ]);
    }
    const lost = keys.filter(dropped);
    expect(lost.length).toBeGreaterThan(3);
    expect(lost.length).toBeLessThan(keys.length - 3);
    for (const [i, key] of keys.entries()) {
      expect(origin.orders.get(key), key).toBe(1); // duplicates: zero
      const first = firsts[i]!;
      if (dropped(key)) {
        expect(first.status, show(first)).toBe(502);
        for (const r of retries[i]!) {
          expect(r.status, `${key}: ${show(r)}`).toBe(409);
          expect(r.json().title).toBe("Outcome indeterminate");
        }
      } else {
        expect(first.status, show(first)).toBe(201);
        for (const r of retries[i]!)
          expect([r.status, r.text, r.headers.get("idempotent-replayed")]).toEqual([201, first.text, "true"]);
      }
    }
    console.log(
      `chaos figures: ${keys.length} keys, ${keys.length * 3} requests, ${lost.length} connections dropped after the order was created (indeterminate, 409), ${keys.length - lost.length} answered and replayed, orders created ${[...keys].reduce((n, k) => n + (origin.orders.get(k) ?? 0), 0)}, duplicates 0`,
    );

    // the origin can answer its reconcile endpoint again: one cron run settles every dropped key
    origin.canAnswer = true;
    await (await isolate[0]!.getWorker()).scheduled({ cron: "* * * * *" });
    expect(await rig.redis.zcard("ai:idem:chaos:indeterminate")).toBe(0);
    for (const key of lost) {
      const r = await attempt(key, 0);
      expect([r.status, r.json(), r.headers.get("idempotent-replayed")], key).toEqual([
        201,
        { order: `ord-${key}-1` },
        "true",
      ]);
      expect(origin.orders.get(key), key).toBe(1);
    }
  });
});
