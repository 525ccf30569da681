/**
 * Issue 33: an indeterminate key (the connection broke after the request was sent) is settled by
 * asking the origin's reconcile endpoint, on the duplicate's arrival or from the cron trigger,
 * instead of answering 409 until an operator or the key's ttl frees it. The origin here is a
 * loopback shop whose order creation and reconcile endpoint the tests steer and hold at gates.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { gate, type Gate } from "../support/middleware-rig.js";
import { call, useStack } from "./stack.js";

const ADMIN = "reconcile-admin-token-0123456789";
const PREFIX = "rc";
const reconciling = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  match: `/${name}/orders`,
  methods: ["POST"],
  idempotency: { reconcile: `/${name}/orders/by-key/{key}`, ...extra },
});
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
  routes: [
    reconciling("found"),
    reconciling("absent"),
    reconciling("stale"),
    reconciling("manual"),
    // the cron asks about keys indeterminate for longer than this: any key, by the time a test runs it
    reconciling("later", { reconcile_after: "1ms" }),
    { name: "plain", match: "/plain/orders", methods: ["POST"], idempotency: {} },
    {
      // one order per 2 s: the second of two at once is queued, and delivered by the consumer
      ...reconciling("queued"),
      on_limit: "queue",
      limits: [{ name: "provider", key: "global", rate: 1, period: "2s", burst: 1 }],
    },
  ],
};

/** How the shop treats the next order for a key: drops the connection before or after creating it. */
type Drop = "before" | "after";

/**
 * The shop: `POST /{route}/orders` creates an order per Idempotency-Key (counted) and answers 201
 * `{ order }`, unless told to drop the connection for that key; `GET /{route}/orders/by-key/{key}`
 * is the reconcile endpoint: 200 with the order (Sluice-Original-Status 201) or 404, 503 while
 * `reconcileDown`, held at a key's gate when one is set, 404 whatever it knows when told to.
 */
interface Shop {
  url: string;
  orders: Map<string, number>;
  drop: Map<string, Drop>;
  /** The fencing token each order request of a key came with. */
  fences: Map<string, string[]>;
  /** What reached the shop, in order: `order:{key}` and `ask:{key}`. */
  events: string[];
  /** Each reconcile question: the key it named (path and header) and the fencing token. */
  asked: Array<{ key: string; header: string; fence: string }>;
  reconcileDown: boolean;
  gates: Map<string, Gate>;
  say404: Set<string>;
  close(): Promise<void>;
}

async function startShop(): Promise<Shop> {
  const shop: Omit<Shop, "url" | "close"> = {
    orders: new Map(),
    drop: new Map(),
    fences: new Map(),
    events: [],
    asked: [],
    reconcileDown: false,
    gates: new Map(),
    say404: new Set(),
  };
  const answer = (res: ServerResponse, status: number, body?: unknown, headers: Record<string, string> = {}) => {
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(body === undefined ? "" : JSON.stringify(body));
  };
  const reconcile = async (req: IncomingMessage, res: ServerResponse, key: string) => {
    shop.events.push(`ask:${key}`);
    shop.asked.push({
      key,
      header: String(req.headers["idempotency-key"]),
      fence: String(req.headers["sluice-fencing-token"]),
    });
    await shop.gates.get(key)?.wait();
    if (shop.reconcileDown) return answer(res, 503, { error: "down" });
    if (shop.say404.has(key) || !shop.orders.has(key)) return answer(res, 404, { error: "no such order" });
    answer(res, 200, { order: `ord-${key}-1` }, { "sluice-original-status": "201" });
  };
  const order = (req: IncomingMessage, res: ServerResponse) => {
    const key = String(req.headers["idempotency-key"]);
    shop.events.push(`order:${key}`);
    shop.fences.set(key, [...(shop.fences.get(key) ?? []), String(req.headers["sluice-fencing-token"])]);
    const drop = shop.drop.get(key);
    shop.drop.delete(key);
    if (drop === "before") return req.socket.destroy();
    const n = (shop.orders.get(key) ?? 0) + 1;
    shop.orders.set(key, n);
    if (drop === "after") return req.socket.destroy();
    answer(res, 201, { order: `ord-${key}-${n}` });
  };
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const path = new URL(req.url ?? "/", "http://shop").pathname;
      const asked = /^\/[a-z]+\/orders\/by-key\/(.+)$/.exec(path);
      if (req.method === "GET" && asked) return void reconcile(req, res, decodeURIComponent(asked[1] ?? ""));
      order(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return Object.assign(shop, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}

const rig = useStack({
  sluice: SLUICE,
  instances: 2,
  queues: true,
  bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
  origin: startShop,
});
const bearer = { authorization: `Bearer ${ADMIN}` };

type Answer = Awaited<ReturnType<typeof call>>;
const createOrder = (route: string, key: string, isolate = 0) =>
  call(rig.workers[isolate]!, `/${route}/orders`, {
    method: "POST",
    ip: "203.0.113.33",
    body: JSON.stringify({ sku: "sku-1", amount: 3 }),
    headers: { "content-type": "application/json", "idempotency-key": key },
  });
const show = (r: Answer) => `${r.status} ${r.headers.get("sluice-decision")} ${r.text.slice(0, 200)}`;

/** The route's indeterminate keys as the index holds them (record hashes). */
const waiting = async (route: string) =>
  (await rig.redis.zrange(`${PREFIX}:idem:${route}:indeterminate`, 0, -1)).map(String);
const record = async (route: string, hash: string) =>
  (await rig.redis.hgetall(`${PREFIX}:idem:${route}:${hash}`)) as unknown as Array<string> | null;
const field = (rec: Array<string> | null, name: string) => {
  const at = rec?.findIndex((v, i) => i % 2 === 0 && v === name) ?? -1;
  return at < 0 ? undefined : rec?.[at + 1];
};
const ledger = async (route: string) =>
  (await call(rig.mf, `/__sluice/ledger?route=${route}&count=100`, { headers: bearer })).json().entries as Array<
    Record<string, string>
  >;
const resolveKey = (body: Record<string, unknown>) =>
  call(rig.mf, "/__sluice/idempotency/resolve", {
    method: "POST",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json", ...bearer },
  });

/** A first call whose connection the shop drops (`drop`): a 502, the key indeterminate; its record hash. */
async function broken(route: string, key: string, drop: Drop): Promise<string> {
  rig.origin.drop.set(key, drop);
  const first = await createOrder(route, key);
  expect(first.status, show(first)).toBe(502);
  const [hash, ...more] = await waiting(route);
  expect(more).toEqual([]);
  expect(field(await record(route, hash!), "state")).toBe("indeterminate");
  return hash!;
}

describe("a duplicate of an indeterminate key is reconciled before it is answered", () => {
  it("the connection broke after the order was created: the retry gets that order, one order", async () => {
    const hash = await broken("found", "fo-1", "after");
    expect(rig.origin.orders.get("fo-1")).toBe(1);

    const retry = await createOrder("found", "fo-1", 1);
    expect(retry.status, show(retry)).toBe(201);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.json()).toEqual({ order: "ord-fo-1-1" });
    // asked once, by key, with the fencing token of the claim whose outcome was unknown
    expect(rig.origin.asked).toEqual([{ key: "fo-1", header: "fo-1", fence: rig.origin.fences.get("fo-1")![0] }]);

    const again = await createOrder("found", "fo-1");
    expect([again.status, again.text, again.headers.get("idempotent-replayed")]).toEqual([201, retry.text, "true"]);
    expect(rig.origin.asked).toHaveLength(1);
    expect(rig.origin.orders.get("fo-1")).toBe(1);
    expect(await waiting("found")).toEqual([]);
    expect(field(await record("found", hash), "key")).toBeUndefined();
    const reconciled = (await ledger("found")).find((e) => e.event === "reconciled");
    expect(reconciled).toMatchObject({ key: hash, status: "201", fence: rig.origin.fences.get("fo-1")![0] });
  });

  it("the connection broke before the origin acted (404): the retry runs, once, as a first arrival", async () => {
    await broken("absent", "ab-1", "before");
    expect(rig.origin.orders.get("ab-1")).toBeUndefined();

    const retry = await createOrder("absent", "ab-1", 1);
    expect(retry.status, show(retry)).toBe(201);
    expect(retry.headers.get("idempotent-replayed")).toBeNull();
    expect(retry.json()).toEqual({ order: "ord-ab-1-1" });
    const [firstFence, retryFence] = rig.origin.fences.get("ab-1")!.map(BigInt);
    expect(retryFence! > firstFence!).toBe(true); // claimed anew, with a higher token

    const again = await createOrder("absent", "ab-1");
    expect([again.status, again.text, again.headers.get("idempotent-replayed")]).toEqual([201, retry.text, "true"]);
    expect(rig.origin.orders.get("ab-1")).toBe(1);
    expect(await waiting("absent")).toEqual([]);
    const events = (await ledger("absent")).map((e) => `${e.event}:${e.status}`).reverse();
    expect(events).toEqual(["claim:", "indeterminate:", "reconciled:404", "claim:", "complete:201", "replay:201"]);
  });

  it("a 404 sent about a claim that a later one replaced is ignored: no second run", async () => {
    const hash = await broken("stale", "st-1", "before");
    const held = gate();
    rig.origin.gates.set("st-1", held);
    rig.origin.say404.add("st-1");
    const duplicate = createOrder("stale", "st-1", 1);
    await held.reached();

    // meanwhile: the operator releases the key, and a new call claims it and breaks after ordering
    expect((await resolveKey({ route: "stale", key: hash, action: "release" })).status).toBe(200);
    rig.origin.drop.set("st-1", "after");
    expect((await createOrder("stale", "st-1")).status).toBe(502);
    const [firstFence, laterFence] = rig.origin.fences.get("st-1")!;
    held.open();

    // the 404 was about the first claim: the later one stays indeterminate, nothing runs again
    const r = await duplicate;
    expect(r.status, show(r)).toBe(409);
    expect(r.json().title).toBe("Outcome indeterminate");
    expect(rig.origin.asked.find((a) => a.key === "st-1")?.fence).toBe(firstFence);
    const rec = await record("stale", hash);
    expect([field(rec, "state"), field(rec, "fence")]).toEqual(["indeterminate", laterFence]);
    expect(rig.origin.orders.get("st-1")).toBe(1);
    expect(rig.origin.fences.get("st-1")).toHaveLength(2);
    expect((await ledger("stale")).filter((e) => e.event === "reconciled")).toEqual([]);
  });

  it("the operator's resolution wins over a reconcile answer that comes after it", async () => {
    const hash = await broken("manual", "mn-1", "after");
    const held = gate();
    rig.origin.gates.set("mn-1", held);
    const duplicate = createOrder("manual", "mn-1", 1);
    await held.reached();
    const manual = { route: "manual", key: hash, action: "replay", status: 200, body: '{"order":"by hand"}' };
    expect((await resolveKey(manual)).status).toBe(200);
    held.open();

    const r = await duplicate;
    expect([r.status, r.text, r.headers.get("idempotent-replayed")]).toEqual([200, '{"order":"by hand"}', "true"]);
    const again = await createOrder("manual", "mn-1");
    expect([again.status, again.text]).toEqual([200, '{"order":"by hand"}']);
    expect(rig.origin.orders.get("mn-1")).toBe(1);
  });

  it("a route without reconcile keeps answering 409 and never asks", async () => {
    rig.origin.drop.set("pl-1", "after");
    expect((await createOrder("plain", "pl-1")).status).toBe(502);
    const r = await createOrder("plain", "pl-1", 1);
    expect([r.status, r.json().title]).toEqual([409, "Outcome indeterminate"]);
    expect(rig.origin.asked.filter((a) => a.key === "pl-1")).toEqual([]);
    expect(await waiting("plain")).toHaveLength(1);
    // the dashboard's idempotency panel shows it waiting
    const data = (await call(rig.mf, "/__sluice/api/dashboard", { headers: bearer })).json() as {
      idempotency: Array<{ route: string; indeterminate?: { waiting: number; oldest_ms: number | null } }>;
    };
    const plain = data.idempotency.find((r) => r.route === "plain")?.indeterminate;
    expect(plain?.waiting).toBe(1);
    expect(plain?.oldest_ms).toBeGreaterThanOrEqual(0);
    expect(data.idempotency.find((r) => r.route === "found")?.indeterminate).toEqual({ waiting: 0, oldest_ms: null });
  });
});

describe("the cron trigger reconciles what is left", () => {
  it("an origin that cannot answer: 409 as before; once it can, a cron run settles the key", async () => {
    await broken("later", "lt-1", "after");
    rig.origin.reconcileDown = true;
    const refused = await createOrder("later", "lt-1", 1);
    expect([refused.status, refused.json().title]).toEqual([409, "Outcome indeterminate"]);
    expect(rig.origin.asked.filter((a) => a.key === "lt-1")).toHaveLength(1);
    expect((await ledger("later")).map((e) => e.event)).toContain("reconcile_failed");

    rig.origin.reconcileDown = false;
    await (await rig.mf.getWorker()).scheduled({ cron: "* * * * *" });
    expect(await waiting("later")).toEqual([]);
    const retry = await createOrder("later", "lt-1");
    expect([retry.status, retry.text, retry.headers.get("idempotent-replayed")]).toEqual([
      201,
      '{"order":"ord-lt-1-1"}',
      "true",
    ]);
    expect(rig.origin.orders.get("lt-1")).toBe(1);
    // a route without reconcile is looked at, never asked about
    expect(await waiting("plain")).toHaveLength(1);
  });
});

/** A queued order (the route's one order per 2 s spent just before): its job's final status, polled at its Location. */
async function queuedOrder(key: string): Promise<Record<string, unknown>> {
  // answered (201) or queued itself (202): either way, the bucket is empty for the next one
  expect([201, 202]).toContain((await createOrder("queued", `spend-${key}`)).status);
  const queued = await createOrder("queued", key);
  expect(queued.status, show(queued)).toBe(202);
  const location = queued.headers.get("location") as string;
  for (let i = 0; i < 300; i++) {
    const s = await call(rig.mf, location);
    const status = s.status === 200 ? s.json() : {};
    if (status.status === "delivered" || status.status === "failed") return status;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`job of ${key} never finished`);
}

describe("a queued delivery whose outcome is unknown is reconciled before anything else", () => {
  it("the origin created the order: the job is delivered with that answer, never sent again", async () => {
    rig.origin.drop.set("q-1", "after");
    const job = await queuedOrder("q-1");
    expect(job).toMatchObject({ status: "delivered", origin_status: 201 });
    expect(rig.origin.events.filter((e) => e.endsWith(":q-1"))).toEqual(["order:q-1", "ask:q-1"]);
    const retry = await createOrder("queued", "q-1", 1);
    expect([retry.status, retry.text, retry.headers.get("idempotent-replayed")]).toEqual([
      201,
      '{"order":"ord-q-1-1"}',
      "true",
    ]);
    expect(rig.origin.orders.get("q-1")).toBe(1);
  });

  it("the origin never got it (404): asked first, then redelivered, once", async () => {
    rig.origin.drop.set("q-2", "before");
    const job = await queuedOrder("q-2");
    expect(job).toMatchObject({ status: "delivered", origin_status: 201, failures: 1 });
    expect(rig.origin.events.filter((e) => e.endsWith(":q-2"))).toEqual(["order:q-2", "ask:q-2", "order:q-2"]);
    expect(rig.origin.orders.get("q-2")).toBe(1);
    const events = (await ledger("queued")).filter((e) => e.event === "reconciled").map((e) => e.status);
    expect(events.sort()).toEqual(["201", "404"]);
  });
});
