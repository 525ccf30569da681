/**
 * Security regressions, replayed over real HTTP/1.1 sockets where a fetch client would hide the
 * attack: `Expect: 100-continue`, interim responses from the origin, header values with surrounding
 * whitespace, chunked bodies without a length, client-sent forwarding headers.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RespClient } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, startWorker, type DemoOrigin, type RedisStack, useStack } from "../integration/stack.js";
import { portOf, rawRequest, type RawHeader, type RawResponse } from "../support/raw-http.js";

const ADMIN = "security-admin-token-0123456789";
const PREFIX = "sg";
const MIB = 1024 * 1024;
/** The schema's ceiling for `queue.max_body` (src/features/shedding/schema.ts: 100 KiB). */
const QUEUE_MAX_BODY = 100 * 1024;

const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  timeout_ms: 2_000,
  routes: [
    { name: "orders", match: "/orders", methods: ["POST"], idempotency: { on_origin_error: "release" } },
    { name: "keyed", match: "/keyed", limits: [{ name: "per-key", key: "header:x-api-key", rate: 1, period: "1h" }] },
    // not `required`, not `derive`: a request without a key needs no body reading at all
    { name: "upload", match: "/upload", methods: ["POST"], idempotency: {} },
    {
      name: "bulk",
      match: "/bulk",
      methods: ["POST"],
      on_limit: "queue",
      queue: { max_body: QUEUE_MAX_BODY },
      limits: [{ name: "one", key: "global", rate: 1, period: "2s", burst: 1 }],
    },
  ],
};

/** An origin that answers with an interim response of its own before the final 200. */
interface InterimOrigin {
  url: string;
  hits: Map<string, number>;
  close(): Promise<void>;
}

async function startInterimOrigin(): Promise<InterimOrigin> {
  const hits = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const url = new URL(req.url ?? "/", "http://origin");
      const key = String(req.headers["idempotency-key"] ?? url.pathname);
      hits.set(key, (hits.get(key) ?? 0) + 1);
      const kind = url.searchParams.get("interim");
      if (kind === "continue") res.writeContinue();
      else if (kind === "processing") res.writeProcessing();
      else if (kind === "early-hints") res.writeEarlyHints({ link: "</style.css>; rel=preload; as=style" });
      setTimeout(() => {
        res.writeHead(200, { "content-type": "application/json", "x-origin": "interim" });
        res.end(JSON.stringify({ ok: true, kind, n: hits.get(key), body: Buffer.concat(chunks).toString("utf8") }));
      }, 50);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const rig = useStack({ sluice: SLUICE, queues: true, listen: true, bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
let stack: RedisStack;
let origin: DemoOrigin;
let interimOrigin: InterimOrigin;
let mf: Miniflare;
let interimWorker: Miniflare;
let port: number;

beforeAll(async () => {
  ({ stack, origin, mf } = rig);
  interimOrigin = await startInterimOrigin();
  // started and stopped here rather than by the rig: the Worker goes before its origin does
  interimWorker = startWorker({
    sluice: {
      key_prefix: "sgi",
      timeout_ms: 2_000,
      routes: [{ name: "interim", match: "/interim", methods: ["POST"], idempotency: { on_origin_error: "release" } }],
    },
    origin: interimOrigin.url,
    redisRestUrl: stack.bridge.url,
  });
  port = portOf(await mf.ready);
  await interimWorker.ready;
});
afterAll(async () => {
  await interimWorker?.dispose();
  await interimOrigin?.close();
});

const raw = (
  method: string,
  target: string,
  headers: RawHeader[],
  extra: { body?: string | Buffer; chunked?: boolean; awaitContinueMs?: number; timeoutMs?: number } = {},
) => rawRequest({ port, method, target, headers, ...extra });
const show = (r: RawResponse) => `${r.status} ${r.headers["sluice-decision"] ?? "-"} ${r.text.slice(0, 300)}`;
const seenWith = (key: string) => origin.seen.filter((s) => s.headers["idempotency-key"] === key);

describe("1. Expect: 100-continue never runs a side effect twice", () => {
  it("a POST with Expect: 100-continue gets the origin's answer, the origin never sees Expect, and a retry replays", async () => {
    const body = '{"sku":"expect","qty":1}';
    const send = () =>
      raw(
        "POST",
        "/orders",
        [
          ["CF-Connecting-IP", "203.0.113.11"],
          ["Content-Type", "application/json"],
          ["Idempotency-Key", "k-expect-1"],
          ["Expect", "100-continue"],
        ],
        { body, awaitContinueMs: 1_000 },
      );
    const first = await send();
    console.log(
      `Expect: 100-continue: interim responses sluice's listener sent the client: ${JSON.stringify(first.interim)}; final ${first.status}`,
    );
    expect(first.status, `first answer: ${show(first)}`).toBe(200);
    expect(first.json()).toMatchObject({ origin: "demo", path: "/orders", body });
    const seen = seenWith("k-expect-1");
    expect(seen, "the origin must see the request exactly once").toHaveLength(1);
    expect(seen[0]!.headers.expect, "the Expect header must not reach the origin").toBeUndefined();

    // the answer is stored after the response (waitUntil): a 409 meanwhile is fine, a second origin call is not
    let again = await send();
    for (let i = 0; i < 30 && again.status === 409; i++) {
      await sleep(100);
      again = await send();
    }
    expect(again.headers["idempotent-replayed"], `retry: ${show(again)}`).toBe("true");
    expect(again.status).toBe(200);
    expect(again.text).toBe(first.text);
    expect(seenWith("k-expect-1"), "the retry must not reach the origin").toHaveLength(1);
  });

  it("an origin that sends an interim response (100, 102, 103) is never called twice for one key, and nobody gets a 500", async () => {
    const failures: string[] = [];
    for (const kind of ["continue", "processing", "early-hints"]) {
      const key = `k-interim-${kind}`;
      const send = () =>
        call(interimWorker, `/interim?interim=${kind}`, {
          method: "POST",
          ip: "203.0.113.12",
          body: '{"a":1}',
          headers: { "content-type": "application/json", "idempotency-key": key },
        });
      const first = await send();
      await sleep(300); // let a stored answer or a settled claim land
      const second = await send();
      const answers = `first ${first.status} ${first.headers.get("sluice-decision")} ${first.text.slice(0, 200)} | second ${second.status} ${second.headers.get("sluice-decision")} ${second.text.slice(0, 200)}`;
      const hits = interimOrigin.hits.get(key) ?? 0;
      console.log(
        `interim ${kind}: origin calls ${hits}; first ${first.status} ${first.headers.get("sluice-decision")}; retry ${second.status} ${second.headers.get("sluice-decision")} replayed=${second.headers.get("idempotent-replayed")}`,
      );
      if (hits !== 1) failures.push(`${kind}: origin called ${hits} times (${answers})`);
      if (first.status === 500 || second.status === 500) failures.push(`${kind}: a 500 (${answers})`);
      const replay = second.headers.get("idempotent-replayed") === "true";
      if (!replay && second.status !== 409)
        failures.push(`${kind}: the retry is neither a replay nor a 409 (${answers})`);
    }
    expect(failures).toEqual([]);
  });
});

describe("6. header identities are trimmed", () => {
  it("a deny-listed API key with trailing whitespace is still denied, and a limit keyed on it is not dodged by whitespace", async () => {
    const put = await call(mf, "/__sluice/lists", {
      method: "PUT",
      body: JSON.stringify({ kind: "deny", entry: "header:x-api-key=k1", ttl: "10m" }),
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    });
    expect(put.status, put.text).toBe(200);
    const open = (value: string) => raw("GET", "/open", [["CF-Connecting-IP", "203.0.113.61"], `x-api-key:${value}`]);
    // lists reach the isolate within 5 s: wait until the plain value is denied
    let plain = await open(" k1");
    for (let i = 0; i < 80 && plain.status !== 403; i++) {
      await sleep(100);
      plain = await open(" k1");
    }
    expect(plain.status, `the list never applied: ${show(plain)}`).toBe(403);
    const padded = await open(" k1 \t");
    expect(padded.status, `"x-api-key: k1 \\t" must be denied like "k1": ${show(padded)}`).toBe(403);

    const keyed = (value: string) => raw("GET", "/keyed", [["CF-Connecting-IP", "203.0.113.62"], `x-api-key:${value}`]);
    const k2 = await keyed(" k2");
    expect(k2.status, show(k2)).toBe(200);
    const k2padded = await keyed("   k2\t");
    expect(k2padded.status, `"x-api-key:   k2\\t" is the same client as "k2": ${show(k2padded)}`).toBe(429);
  });
});

describe("8. bodies are bounded while they are read", () => {
  it("a 12 MB chunked body is refused on an idempotent route with a key, 100 KiB + 1 is not queued, and without a key 12 MB streams through", async () => {
    const big = Buffer.alloc(12 * MIB, "a");
    const ip: RawHeader = ["CF-Connecting-IP", "203.0.113.81"];

    const keyed = await raw(
      "POST",
      "/upload",
      [ip, ["Content-Type", "application/octet-stream"], ["Idempotency-Key", "big-1"], ["X-Case", "keyed"]],
      { body: big, chunked: true, timeoutMs: 60_000 },
    );
    console.log(
      `chunked 12 MB with a key: ${keyed.status} after ${keyed.bytesSentBeforeAnswer} of ${big.length} body+head bytes sent`,
    );
    expect(keyed.status, `12 MB chunked with a key: ${show(keyed)}`).toBe(413);
    await sleep(300);
    expect(
      origin.seen.filter((s) => s.headers["x-case"] === "keyed"),
      "the origin must never see the refused body",
    ).toHaveLength(0);

    // the queue route: spend its one token, then a chunked body one byte over max_body while shed
    const spend = await raw("POST", "/bulk", [ip, ["Content-Type", "text/plain"], ["X-Case", "bulk-spend"]], {
      body: "x",
    });
    expect(spend.status, show(spend)).toBe(200);
    const over = Buffer.alloc(QUEUE_MAX_BODY + 1, "b");
    const queued = await raw("POST", "/bulk", [ip, ["Content-Type", "text/plain"], ["X-Case", "bulk-over"]], {
      body: over,
      chunked: true,
      timeoutMs: 30_000,
    });
    expect(queued.status, `100 KiB + 1 chunked to a shed queue route: ${show(queued)}`).toBe(413);
    await sleep(500); // a job's status is written after the response
    const redis = RespClient.fromUrl(stack.redis.url);
    try {
      const jobs = (await redis.send(["KEYS", `${PREFIX}:job:*`])) as unknown[];
      expect(jobs.map(String), "nothing may be queued").toEqual([]);
    } finally {
      redis.close();
    }
    await sleep(3_000); // a job would have been delivered by now (2 s bucket)
    expect(
      origin.seen.filter((s) => s.headers["x-case"] === "bulk-over"),
      "nothing may be delivered",
    ).toHaveLength(0);

    // no key: sluice needs no body, so it does not read one; the origin gets all of it
    const streamed = await raw(
      "POST",
      "/upload",
      [ip, ["Content-Type", "application/octet-stream"], ["X-Case", "streamed"]],
      { body: big, chunked: true, timeoutMs: 60_000 },
    );
    expect(streamed.status, `12 MB chunked without a key: ${show(streamed)}`).toBe(200);
    const seen = origin.seen.filter((s) => s.headers["x-case"] === "streamed");
    expect(seen).toHaveLength(1);
    expect(seen[0]!.body.length, "the origin must receive the whole body").toBe(big.length);
  }, 120_000);
});

describe("9. client-sent forwarding headers are not trusted", () => {
  it("True-Client-IP, X-Real-IP, Forwarded and X-Forwarded-For reach the origin naming the CF-Connecting-IP only", async () => {
    const r = await raw("GET", "/fwd/probe", [
      ["CF-Connecting-IP", "203.0.113.50"],
      ["True-Client-IP", "1.2.3.4"],
      ["X-Real-IP", "1.2.3.4"],
      ["Forwarded", "for=1.2.3.4"],
      ["X-Forwarded-For", "1.2.3.4"],
    ]);
    expect(r.status, show(r)).toBe(200);
    const seen = origin.seen.filter((s) => s.path === "/fwd/probe");
    expect(seen).toHaveLength(1);
    const h = seen[0]!.headers;
    for (const name of ["true-client-ip", "x-real-ip", "forwarded", "x-forwarded-for"]) {
      const v = h[name];
      expect(v === undefined ? "" : String(v), `${name} at the origin: ${JSON.stringify(v)}`).not.toContain("1.2.3.4");
    }
    for (const name of ["true-client-ip", "x-real-ip"]) {
      const v = h[name];
      if (v !== undefined) expect(v, name).toBe("203.0.113.50");
    }
    if (h.forwarded !== undefined) expect(h.forwarded).toMatch(/(^|[;,\s])for="?203\.0\.113\.50"?([;,\s]|$)/i);
    expect(h["x-forwarded-for"]).toBe("203.0.113.50");
  });
});
