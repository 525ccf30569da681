/**
 * Cutting a response before its usage figure must not pay only the reserve (docs/algorithms.md, Cost from the
 * response; Security model). The built Worker in workerd against a real Redis, in front of an
 * LLM-like origin whose event stream sends its content at once and its usage event (5000 tokens)
 * only afterwards, as a model's final chunk comes last. A client on a bare socket reads the content
 * and closes the connection before the usage; sluice must read the origin's stream on in
 * waitUntil and settle the real 5000. A JSON body past the 1 MiB reading cap, and a stream that
 * ends without usage, can never report: they pay `max`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/index.js";
import type { SluiceInput } from "../../src/config/schema.js";
import { keyedBuckets } from "../../src/features/rate-limit/decision/buckets.js";
import { call, sleep, useStack } from "../integration/stack.js";
import { portOf } from "../support/raw-http.js";

const BURST = 40_000;
const USAGE = 5_000;
const RESERVE = 100;
const MAX = 8_000;

const SLUICE: SluiceInput = {
  key_prefix: "sc",
  timeout_ms: 5_000,
  routes: [
    {
      name: "chat",
      match: "/v1/chat",
      limits: [
        {
          name: "tpd",
          key: "header:x-api-key",
          rate: BURST,
          period: "1d",
          burst: BURST,
          cost: { response: "sse:usage.total_tokens", reserve: RESERVE, max: MAX },
        },
      ],
    },
    {
      name: "complete",
      match: "/v1/complete",
      limits: [
        {
          name: "tpd",
          key: "header:x-api-key",
          rate: BURST,
          period: "1d",
          burst: BURST,
          cost: { response: "json:usage.total_tokens", reserve: RESERVE, max: MAX },
        },
      ],
    },
  ],
};

const CONTENT =
  'data: {"id":"c1","choices":[{"delta":{"content":"Hel"}}],"usage":null}\n\n' +
  'data: {"id":"c1","choices":[{"delta":{"content":"lo"}}],"usage":null}\n\n';
const MORE = 'data: {"id":"c1","choices":[{"delta":{"content":"."}}],"usage":null}\n\n';
const MORE_CONTENT = 10;
const USAGE_EVENT = `data: {"id":"c1","choices":[],"usage":{"prompt_tokens":9,"total_tokens":${USAGE}}}\n\n`;

/**
 * /v1/chat streams CONTENT at once, then MORE every 60 ms, ten times, then the usage event (with
 * `?usage=none`, none) and `[DONE]`; /v1/complete answers a JSON body carrying the usage, padded past 1 MiB with
 * `?big=1`. `streamsFinished` counts the streams the origin wrote to their end.
 */
async function startLlmOrigin() {
  const counts = { streamsFinished: 0 };
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://o");
    if (url.pathname === "/v1/complete") return answerJson(res, url.searchParams.get("big") === "1");
    void stream(req, res, url.searchParams.get("usage") !== "none", counts);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    counts,
    close: () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}

function answerJson(res: ServerResponse, big: boolean): void {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ ...(big ? { pad: "x".repeat(1_100_000) } : {}), usage: { total_tokens: USAGE } }));
}

async function stream(req: IncomingMessage, res: ServerResponse, usage: boolean, counts: { streamsFinished: number }) {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  res.write(CONTENT);
  // more content, a piece at a time: the runtime notices the client has gone on a write
  for (let i = 0; i < MORE_CONTENT; i++) {
    await sleep(60);
    if (req.destroyed || res.destroyed) return;
    res.write(MORE);
  }
  res.end(`${usage ? USAGE_EVENT : ""}data: [DONE]\n\n`);
  counts.streamsFinished += 1;
}

const rig = useStack({ sluice: SLUICE, listen: true, origin: startLlmOrigin });

/**
 * The attack: a GET of the stream on a bare socket that reads until the content has arrived, then
 * closes the connection, before the usage event; what it read.
 */
async function readContentThenLeave(apiKey: string, query = ""): Promise<string> {
  const port = portOf(await rig.mf.ready);
  const socket = connect(port, "127.0.0.1");
  socket.write(
    `GET /v1/chat${query} HTTP/1.1\r\nHost: sluice.test\r\nCF-Connecting-IP: 203.0.113.70\r\n` +
      `x-api-key: ${apiKey}\r\nAccept: text/event-stream\r\n\r\n`,
  );
  let seen = "";
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no content within 10 s: ${seen.slice(0, 300)}`)), 10_000);
    socket.on("data", (chunk: Buffer) => {
      seen += chunk.toString("utf8");
      if (!seen.includes('"lo"')) return;
      clearTimeout(timer);
      socket.destroy();
      resolve();
    });
    socket.on("error", reject);
  });
  return seen;
}

/** The tokens a route's `tpd` bucket holds for an API key, read from Redis (absent: full). */
async function tokensOf(route: string, apiKey: string): Promise<number> {
  const loaded = loadConfig({ ORIGIN_URL: "https://o.example", SLUICE });
  if (!loaded.ok) throw loaded.error;
  const r = loaded.config.routes.find((x) => x.name === route);
  if (!r) throw new Error(route);
  const url = new URL(`http://sluice.test${r.match}`);
  const facts = { ip: "203.0.113.70", matchPath: url.pathname, headers: new Headers({ "x-api-key": apiKey }), url };
  const b = (await keyedBuckets(r, facts, loaded.config, "home")).find((x) => x.limit.name === "tpd");
  if (!b) throw new Error("tpd");
  const value = (await rig.redis.get<string>(b.key)) ?? undefined;
  if (value === undefined) return BURST;
  const [units, unit] = value.split(":").map(Number) as [number, number];
  return units / unit;
}

/** Within the refill a test's few seconds add (40 000 a day: about half a token a second). */
const REFILL_SLACK = 10;

/** Polls until the bucket holds about `tokens`, or 15 s have passed; what it holds. */
async function settledTo(route: string, apiKey: string, tokens: number): Promise<number> {
  const start = Date.now();
  let now = await tokensOf(route, apiKey);
  while (!(now >= tokens && now <= tokens + REFILL_SLACK) && Date.now() - start < 15_000) {
    await sleep(100);
    now = await tokensOf(route, apiKey);
  }
  return now;
}

/** `tokens` is `expected`, give or take the refill of the test's few seconds. */
function expectNear(tokens: number, expected: number): void {
  expect(tokens).toBeGreaterThanOrEqual(expected);
  expect(tokens).toBeLessThanOrEqual(expected + REFILL_SLACK);
}

const remainingOf = (res: { headers: { get(name: string): string | null } }) =>
  Number(/"tpd";r=(-?\d+)/.exec(res.headers.get("ratelimit") ?? "")?.[1]);

describe("a response cut before its usage is charged its usage, or max, never just the reserve", () => {
  it("sse: three streams cut after their content (a raw socket that closes) are each charged the usage they report later", async () => {
    for (let i = 0; i < 3; i++) {
      const seen = await readContentThenLeave("cutter");
      expect(seen).toMatch(/^HTTP\/1\.1 200/);
      expect(seen, "the client left before the usage event").not.toContain("total_tokens");
    }
    // the reserve alone would leave BURST - 3 × 100
    expectNear(await settledTo("chat", "cutter", BURST - 3 * USAGE), BURST - 3 * USAGE);
    expect(rig.origin.counts.streamsFinished, "sluice read each stream on to its end").toBeGreaterThanOrEqual(3);
    // a subsequent request sees it in its RateLimit: what is left, less its own reserve
    const probe = await call(rig.mf, "/v1/chat", { ip: "203.0.113.70", headers: { "x-api-key": "cutter" } });
    expectNear(remainingOf(probe), BURST - 3 * USAGE - RESERVE);
  });

  it("sse: a cut stream that then ends without usage is charged max", async () => {
    await readContentThenLeave("no-usage", "?usage=none");
    expectNear(await settledTo("chat", "no-usage", BURST - MAX), BURST - MAX);
  });

  it("json: a body past the 1 MiB reading cap is charged max, not the reserve", async () => {
    for (let i = 0; i < 2; i++) {
      const res = await call(rig.mf, "/v1/complete?big=1", { ip: "203.0.113.70", headers: { "x-api-key": "big" } });
      expect(res.status).toBe(200);
      // the client has the whole body, figure and all; sluice stopped reading at the cap
      expect(res.text.length).toBeGreaterThan(1 << 20);
    }
    expectNear(await settledTo("complete", "big", BURST - 2 * MAX), BURST - 2 * MAX);
  });
});
