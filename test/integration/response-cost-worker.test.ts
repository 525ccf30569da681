import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Miniflare } from "miniflare";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/index.js";
import type { SluiceInput } from "../../src/config/schema.js";
import { keyedBuckets } from "../../src/features/rate-limit/decision/buckets.js";
import { call, sleep, useStack } from "./stack.js";

/*
 * Cost from the response end to end (docs/algorithms.md, Cost from the response): the built Worker in workerd
 * (three isolates against one Redis), in front of an origin that reports the tokens it spent as an
 * LLM API does: in a response header, in a JSON body, or in the last event of a streamed
 * text/event-stream. Each request takes the reserve at admission; once its response has been
 * delivered the bucket is settled to the real figure, read from Redis.
 */

const KEY = "header:x-api-key";
// 1000 tokens a day: the refill while a test runs is a fraction of a token
const tpd = (response: string, reserve: number, max: number) => ({
  name: "tpd",
  key: KEY,
  rate: 1000,
  period: "1d",
  burst: 1000,
  cost: { response, reserve, max },
});

const SLUICE: SluiceInput = {
  // a decision under a loaded machine is still Redis's (not a degraded, local one)
  timeout_ms: 5_000,
  routes: [
    { name: "header", match: "/v1/header", limits: [tpd("header:x-usage-tokens", 100, 5000)] },
    { name: "complete", match: "/v1/complete", limits: [tpd("json:usage.total_tokens", 100, 5000)] },
    {
      name: "chat",
      match: "/v1/chat",
      limits: [
        tpd("sse:usage.total_tokens", 100, 5000),
        { name: "in-flight", key: KEY, algorithm: "concurrency", limit: 2, lease: "30s" },
      ],
    },
    { name: "bound", match: "/v1/bound", limits: [tpd("sse:usage.total_tokens", 100, 400)] },
  ],
};

/** The events of an OpenAI-style stream whose last chunk reports `total` tokens. */
const events = (total: number) => [
  'data: {"id":"c1","choices":[{"delta":{"content":"Hel"}}],"usage":null}\n\n',
  'data: {"id":"c1","choices":[{"delta":{"content":"lo ✓"}}],"usage":null}\n\n',
  `data: {"id":"c1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":${total - 9},"total_tokens":${total}}}\n\n`,
  "data: [DONE]\n\n",
];

/**
 * An LLM-like origin: `?tokens=N` is what it reports. /v1/header in x-usage-tokens, /v1/complete
 * in a JSON body, /v1/chat and /v1/bound in an event stream written in pieces (lines cut across
 * writes); /v1/bound first holds the request 300 ms, so that many are in flight at once.
 */
async function startLlmOrigin(): Promise<{ url: string; served: Map<string, number>; close(): Promise<void> }> {
  const served = new Map<string, number>();
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://o");
    served.set(url.pathname, (served.get(url.pathname) ?? 0) + 1);
    const tokens = Number(url.searchParams.get("tokens") ?? "0");
    if (url.pathname === "/v1/header") return void res.writeHead(200, { "x-usage-tokens": String(tokens) }).end("ok");
    if (url.pathname === "/v1/complete") return void answerJson(res, tokens);
    void streamEvents(req, res, tokens, url.pathname === "/v1/bound" ? 300 : 0);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    served,
    close: () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}

function answerJson(res: ServerResponse, tokens: number): void {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ id: "c1", usage: { prompt_tokens: 1, total_tokens: tokens } }));
}

async function streamEvents(req: IncomingMessage, res: ServerResponse, tokens: number, holdMs: number): Promise<void> {
  await sleep(holdMs);
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  const text = events(tokens).join("");
  for (let at = 0; at < text.length && !req.destroyed; at += 23) {
    res.write(text.slice(at, at + 23));
    await sleep(5);
  }
  res.end();
}

const rig = useStack({ sluice: SLUICE, instances: 3, origin: startLlmOrigin });
const worker = (i: number) => rig.workers[i % 3] as Miniflare;
const asKey = (key: string) => ({ headers: { "x-api-key": key } });

/** The tokens a route's `tpd` bucket holds for an API key, read from Redis (negative: in debt; absent: full). */
async function tokensOf(route: string, apiKey: string): Promise<number> {
  const loaded = loadConfig({ ORIGIN_URL: "https://o.example", SLUICE });
  if (!loaded.ok) throw loaded.error;
  const r = loaded.config.routes.find((x) => x.name === route);
  if (!r) throw new Error(route);
  const url = new URL(`http://sluice.test${r.match}`);
  const facts = { ip: "203.0.113.1", matchPath: url.pathname, headers: new Headers({ "x-api-key": apiKey }), url };
  const b = (await keyedBuckets(r, facts, loaded.config, "home")).find((x) => x.limit.name === "tpd");
  if (!b) throw new Error("tpd");
  const value = (await rig.redis.get<string>(b.key)) ?? undefined;
  if (value === undefined) return 1000;
  const [units, unit] = value.split(":").map(Number) as [number, number];
  return units / unit;
}

/** Polls the bucket until it holds about `tokens` (the refill adds a fraction), or 5 s have passed; what it holds. */
async function settledTo(route: string, apiKey: string, tokens: number): Promise<number> {
  const start = Date.now();
  let now = await tokensOf(route, apiKey);
  while (Math.abs(now - tokens) > 0.5 && Date.now() - start < 5_000) {
    await sleep(50);
    now = await tokensOf(route, apiKey);
  }
  return now;
}

const remainingOf = (headers: { get(name: string): string | null }) =>
  Number(/"tpd";r=(-?\d+)/.exec(headers.get("ratelimit") ?? "")?.[1]);

describe("cost from the response, in workerd", () => {
  it("header: settles the bucket to the figure in x-usage-tokens, seen in the next request's RateLimit", async () => {
    const first = await call(worker(0), "/v1/header?tokens=250", asKey("h1"));
    expect(first.status).toBe(200);
    // admission took the reserve: 1000 - 100
    expect(remainingOf(first.headers)).toBe(900);
    expect(await settledTo("header", "h1", 750)).toBeCloseTo(750, 0);
    const next = await call(worker(1), "/v1/header?tokens=100", asKey("h1"));
    expect(remainingOf(next.headers)).toBe(650);
  });

  it("json: settles to the figure at the path of a JSON body, passed on unchanged", async () => {
    const res = await call(worker(1), "/v1/complete?tokens=420", asKey("j1"));
    expect(res.json()).toEqual({ id: "c1", usage: { prompt_tokens: 1, total_tokens: 420 } });
    expect(await settledTo("complete", "j1", 580)).toBeCloseTo(580, 0);
  });

  it("sse: settles to the usage of the stream's last event once it has been delivered, and frees the in-flight slot", async () => {
    const res = await call(worker(2), "/v1/chat?tokens=321", asKey("s1"));
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    // every byte as the origin wrote it
    expect(res.text).toBe(events(321).join(""));
    expect(await settledTo("chat", "s1", 679)).toBeCloseTo(679, 0);
    // the same body wrapper freed the slot: two more at once are both admitted
    const two = await Promise.all([0, 1].map((i) => call(worker(i), "/v1/chat?tokens=10", asKey("s1"))));
    expect(two.map((r) => r.status)).toEqual([200, 200]);
    expect(await settledTo("chat", "s1", 659)).toBeCloseTo(659, 0);
  });

  it("N concurrent requests never spend more than capacity + N × (max − reserve): 12 at once, capacity 1000, reserve 100, max 400", async () => {
    const N = 12;
    const [capacity, reserve, max] = [1000, 100, 400];
    // each reports 10 000 tokens: charged max
    const all = await Promise.all(
      Array.from({ length: N }, (_, i) => call(worker(i), "/v1/bound?tokens=10000", asKey("b1"))),
    );
    const admitted = all.filter((r) => r.status === 200).length;
    expect(all.every((r) => r.status === 200 || r.status === 429)).toBe(true);
    expect(admitted).toBeGreaterThanOrEqual(3);
    // admission needs the reserve in the bucket: at most capacity / reserve in flight at once
    expect(admitted).toBeLessThanOrEqual(capacity / reserve);
    expect(rig.origin.served.get("/v1/bound")).toBe(admitted);
    const left = await settledTo("bound", "b1", capacity - admitted * max);
    const spent = capacity - left;
    // settled to the real figure (bounded by max) for every admitted request...
    expect(spent).toBeCloseTo(admitted * max, 0);
    // ...and so within the bound
    expect(spent).toBeLessThanOrEqual(capacity + N * (max - reserve));
    // the overshoot is a debt: the next request is refused until the refill has paid it back
    const next = await call(worker(0), "/v1/bound?tokens=1", asKey("b1"));
    expect(next.status).toBe(429);
    expect(Number(next.headers.get("retry-after"))).toBeGreaterThan(60);
  });
});
