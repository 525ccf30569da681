/**
 * Security regression (issue 29, finding 13): a route's adaptive in-flight slots were held by a
 * client that reads nothing. The slot was freed when the response body had been delivered, so four
 * GETs of a large answer, never read, held every slot of the region (the adaptive limit is keyed
 * `global`), and honest clients got 429 until those sockets closed. The adaptive limit measures the
 * origin (its latency samples end with the origin's response headers): its slot is now freed when
 * the origin's answer is in, whatever the client reads. A `concurrency` limit of the route's own
 * still counts a request until its response is delivered (its documented meaning: a streamed body
 * is work the origin is held to); keyed per client, an unread body holds that client's slots only.
 *
 * Raw sockets that write a request and never read a byte, against the Worker in workerd listening
 * on a port, with an origin whose answer (64 MiB) is far more than the buffers between them hold.
 * Bounded: a handful of requests, every wait a poll with a generous cap.
 */
import { createServer, type ServerResponse } from "node:http";
import { connect, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack, type Closable } from "../integration/stack.js";
import { portOf } from "../support/raw-http.js";

const SLOTS = 4;
const BIG = 64 * 1024 * 1024;
const SLUICE: SluiceInput = {
  key_prefix: "aur",
  timeout_ms: 5_000,
  routes: [
    {
      name: "shop",
      match: "/shop/*",
      // a limit that stays at 4 (min = max), slots that outlive the test (lease): only a release frees one
      adaptive: { target: "10s", interval: "1s", initial: SLOTS, min: SLOTS, max: SLOTS, lease: "2m" },
    },
    {
      name: "downloads",
      match: "/dl/*",
      limits: [{ name: "per-client", key: "ip", algorithm: "concurrency", limit: 2, lease: "2m" }],
    },
  ],
};

interface BigOrigin extends Closable {
  /** Answers whose headers (and first bytes) have gone out, by path prefix. */
  answered: Map<string, number>;
  /** `/…/held…` requests waiting for `release()`. */
  held: number;
  release(): void;
}

/**
 * `/…/big…`: 200 with a 64 MiB body, written as the reader takes it; `/…/held…`: a small 200 once
 * the test releases it (a request in flight for as long as the test needs); anything else: a small 200.
 */
async function bigOrigin(): Promise<BigOrigin> {
  const answered = new Map<string, number>();
  let waiting: ServerResponse[] = [];
  const server = createServer((req, res) => {
    req.resume();
    const path = req.url ?? "/";
    const prefix = path.split("/")[1] ?? "";
    if (path.includes("/held")) {
      waiting.push(res);
      origin.held = waiting.length;
      return;
    }
    if (!path.includes("/big")) {
      res.writeHead(200, { "content-type": "text/plain" }).end("small");
      return;
    }
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": String(BIG) });
    answered.set(prefix, (answered.get(prefix) ?? 0) + 1);
    writeBig(res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const origin: BigOrigin = {
    url: `http://127.0.0.1:${port}`,
    answered,
    held: 0,
    release: () => {
      for (const res of waiting) res.writeHead(200, { "content-type": "text/plain" }).end("held");
      waiting = [];
      origin.held = 0;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  return origin;
}

/** Writes BIG bytes, pausing whenever the socket's buffer is full (what a real origin does). */
function writeBig(res: ServerResponse): void {
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  let left = BIG;
  const more = () => {
    while (left > 0) {
      left -= chunk.length;
      if (!res.write(chunk)) return void res.once("drain", more);
    }
    res.end();
  };
  res.on("error", () => undefined);
  more();
}

const rig = useStack({ sluice: SLUICE, listen: true, origin: bigOrigin });

/** Sockets that asked for something and read nothing; destroyed after the file. */
const unread: Socket[] = [];
afterAll(() => unread.forEach((s) => s.destroy()));

/** Writes a GET on a fresh connection and never reads a byte of the answer. */
async function neverRead(path: string, ip: string): Promise<void> {
  const port = portOf(await rig.mf.ready);
  const socket = connect({ port, host: "127.0.0.1" });
  unread.push(socket);
  socket.pause();
  socket.on("error", () => undefined);
  socket.write(`GET ${path} HTTP/1.1\r\nHost: sluice.test\r\nCF-Connecting-IP: ${ip}\r\n\r\n`);
}

/** Polls `check` every 100 ms until it holds or `capMs` passes: whether it held. */
async function eventually(check: () => Promise<boolean>, capMs: number): Promise<boolean> {
  for (const started = Date.now(); Date.now() - started < capMs; await sleep(100)) if (await check()) return true;
  return check();
}

describe("13. a client that reads nothing holds no adaptive slot", () => {
  it(`${SLOTS} unread GETs of a 64 MiB answer: an honest client is still admitted once the origin has answered them`, async () => {
    const attacker = "203.0.113.13";
    for (let i = 0; i < SLOTS; i++) await neverRead(`/shop/big-${i}`, attacker);
    // the origin has answered all four (headers out, the body stalled by the readers): they took the four slots
    expect(await eventually(async () => rig.origin.answered.get("shop") === SLOTS, 20_000)).toBe(true);
    // each slot is freed after its answer came in (deferred): the honest client gets in within the cap
    const honest = async () => (await call(rig.mf, "/shop/small", { ip: "198.51.100.13" })).status === 200;
    expect(await eventually(honest, 10_000), "an honest client admitted while the readers read nothing").toBe(true);
    // and the limit still holds for requests the origin is working on: four take the four slots, a fifth is refused
    const working = Array.from({ length: SLOTS }, (_, i) =>
      call(rig.mf, `/shop/held-${i}`, { ip: `198.51.100.${20 + i}` }),
    );
    expect(await eventually(async () => rig.origin.held === SLOTS, 20_000)).toBe(true);
    const fifth = await call(rig.mf, "/shop/small", { ip: "198.51.100.30" });
    expect(fifth.status).toBe(429);
    expect(fifth.json()).toMatchObject({ limit: "adaptive" });
    rig.origin.release();
    expect((await Promise.all(working)).map((r) => r.status)).toEqual(Array(SLOTS).fill(200));
  });

  it("a concurrency limit keyed per client counts an unread download until it is delivered: that client's slots only", async () => {
    const reader = "203.0.113.14";
    for (let i = 0; i < 2; i++) await neverRead(`/dl/big-${i}`, reader);
    expect(await eventually(async () => rig.origin.answered.get("dl") === 2, 20_000)).toBe(true);
    // its own third download waits for one of the two to be delivered (or its lease)
    const own = await call(rig.mf, "/dl/small", { ip: reader });
    expect(own.status).toBe(429);
    expect(own.json()).toMatchObject({ limit: "per-client" });
    // another client's are its own
    expect((await call(rig.mf, "/dl/small", { ip: "198.51.100.15" })).status).toBe(200);
  });
});
