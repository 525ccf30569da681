import { describe, expect, it } from "vitest";
import { background, countedApp, from, gate, middlewareRig } from "../../../test/support/middleware-rig.js";
import { rateLimit, type RateLimitOptions } from "../../index.js";

/*
 * rateLimit() with a limit charged what the origin reports (docs/algorithms.md, Cost from the response), in
 * Node against a real Redis: `reserve` is taken at admission and held while the request runs, the
 * charge is settled to the reported figure (at most `max`) after the response, a figure above what
 * was left puts the bucket in debt, refused with an honest Retry-After until the refill pays it
 * back, and a 2xx response whose figure cannot be read pays `max`.
 */
const rig = middlewareRig("rcost");

// 1000 tokens a day (the refill is negligible while a test runs: 1 token every 86.4 s)
const DAY_S = 86_400;
const limitsOf = (reserve: number, burst = 1000, max = 5000): RateLimitOptions["limits"] => [
  {
    name: "tpd",
    key: "header:x-api-key",
    rate: 1000,
    period: "1d",
    burst,
    cost: { response: "header:x-usage-tokens", reserve, max },
  },
];
/** A request whose handler will report `usage` (none: no header), held at the gate when `hold`. */
const asking = (usage?: number, hold = false) =>
  from("198.51.100.40", {
    "x-api-key": "k",
    ...(usage === undefined ? {} : { "x-report": String(usage) }),
    ...(hold ? { "x-hold": "1" } : {}),
  });

/** An app whose handler waits at `g` (when given and the request says hold), then answers with the usage the request asked it to report. */
function appWith(limits: RateLimitOptions["limits"], g?: { wait: () => Promise<void> }) {
  return countedApp(rateLimit(rig.options({ limits })), async (c) => {
    if (c.req.header("x-hold")) await g?.wait();
    const usage = c.req.header("x-report");
    return c.text("done", 200, usage === undefined ? {} : { "x-usage-tokens": usage });
  });
}

const remainingOf = (res: Response) => Number(/;r=(\d+)/.exec(res.headers.get("RateLimit") ?? "")?.[1]);

describe("rateLimit() with cost = { response = ... }", () => {
  it("holds the reserve while the request runs and settles to the reported figure after", async () => {
    const g = gate();
    const { app } = appWith(limitsOf(400), g);
    const bg = background();
    const first = app.request("/", asking(50, true), {}, bg.ctx);
    await g.reached();
    // the first request holds 400 while it runs: this one leaves 1000 - 400 - 400
    const second = await app.request("/", asking(100), {}, bg.ctx);
    expect(remainingOf(second)).toBe(200);
    g.open();
    expect((await first).status).toBe(200);
    await bg.settled();
    // settled: 1000 - 50 - 100 = 850 before this one takes its 400 reserve
    const third = await app.request("/", asking(400), {}, bg.ctx);
    expect(third.status).toBe(200);
    expect(remainingOf(third)).toBe(450);
  });

  it("goes into debt past what was left (at most max), refused with an honest Retry-After", async () => {
    const { app } = appWith(limitsOf(100, 1000, 1500));
    const bg = background();
    // reports 9999, charged max = 1500: 1000 - 1500 = -500
    expect((await app.request("/", asking(9999), {}, bg.ctx)).status).toBe(200);
    await bg.settled();
    const refused = await app.request("/", asking(1), {}, bg.ctx);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("RateLimit")).toMatch(/;r=0;/);
    // until the bucket holds the reserve again: 600 tokens at 1 per 86.4 s
    const wait = Number(refused.headers.get("Retry-After"));
    expect(wait).toBeGreaterThanOrEqual(600 * (DAY_S / 1000) - 2);
    expect(wait).toBeLessThanOrEqual(600 * (DAY_S / 1000));
  });

  it("charges max to a 2xx response that reports nothing, not the reserve", async () => {
    const { app } = appWith(limitsOf(100, 1000, 400));
    const bg = background();
    expect((await app.request("/", asking(), {}, bg.ctx)).status).toBe(200);
    await bg.settled();
    expect(remainingOf(await app.request("/", asking(100), {}, bg.ctx))).toBe(1000 - 400 - 100);
  });

  it("never spends more than the capacity plus (figure - reserve) per request in flight, paid back as debt", async () => {
    // capacity 300, reserve 100: 3 of 6 concurrent requests are admitted, each then reports 250
    const g = gate();
    const { app, calls } = appWith(limitsOf(100, 300), g);
    const bg = background();
    const all = Array.from({ length: 6 }, () => app.request("/", asking(250, true), {}, bg.ctx));
    await g.reached(3);
    g.open();
    const statuses = (await Promise.all(all)).map((r) => r.status);
    await bg.settled();
    expect(statuses.filter((s) => s === 200)).toHaveLength(3);
    expect(calls.n).toBe(3);
    // spent 3 × 250 = 750 = 300 + 3 × (250 - 100): a debt of 450, refused until 550 tokens refill
    const refused = await app.request("/", asking(1), {}, bg.ctx);
    expect(refused.status).toBe(429);
    const wait = Number(refused.headers.get("Retry-After"));
    expect(wait).toBeGreaterThanOrEqual(550 * (DAY_S / 1000) - 2);
    expect(wait).toBeLessThanOrEqual(550 * (DAY_S / 1000));
  });

  it("refuses a cost from the response on an algorithm other than token_bucket, naming the field", () => {
    expect(() =>
      rateLimit(
        rig.options({
          limits: [{ ...limitsOf(100)[0]!, algorithm: "fixed_window", burst: 1000, period: "1m" }],
        }),
      ),
    ).toThrow(/limits\[0\] \("tpd"\)\.cost.*token_bucket/);
    expect(() => rateLimit(rig.options({ limits: [{ ...limitsOf(100)[0]!, lease: true }] }))).toThrow(
      /limits\[0\] \("tpd"\)\.lease/,
    );
  });
});

/*
 * A figure in the body (json:, sse:): read as the body passes to the client, settled once it has
 * been delivered. The handler answers as the request's x-body asks.
 */
const bodyLimits = (response: string, reserve = 100, max = 5000): RateLimitOptions["limits"] => [
  {
    name: "tpd",
    key: "header:x-api-key",
    rate: 1000,
    period: "1d",
    burst: 1000,
    cost: { response, reserve, max },
  },
];

const usage = (n: number) => ({ id: "c1", choices: [], usage: { prompt_tokens: 1, total_tokens: n } });
/** An OpenAI-style stream reporting `total` in its last chunk (none: no usage at all), cut mid-line across writes. */
const sseText = (total?: number) =>
  'data: {"id":"c1","choices":[{"delta":{"content":"Hel"}}],"usage":null}\r\n\r\n' +
  'data: {"id":"c1","choices":[{"delta":{"content":"lo"}}],"usage":null}\r\n\r\n' +
  (total === undefined ? "" : `data: ${JSON.stringify(usage(total))}\r\n\r\n`) +
  "data: [DONE]\r\n\r\n";

/** A body written in pieces of `size` bytes, a tick apart, so that lines and events are split across chunks. */
function trickle(text: string, size = 17, hold?: Promise<void>): ReadableStream<Uint8Array> {
  const all = new TextEncoder().encode(text);
  let at = 0;
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      await new Promise((r) => setTimeout(r, 1));
      if (at >= all.length) {
        await hold;
        return c.close();
      }
      c.enqueue(all.slice(at, (at += size)));
    },
  });
}

const SSE = { "content-type": "text/event-stream" };

/**
 * An OpenAI-style stream whose content comes at once and whose usage (`total`) only once `later`
 * has settled (as a model's final chunk does); a `later` that rejects fails the stream there.
 */
function lateUsage(total: number, later: Promise<void>): ReadableStream<Uint8Array> {
  const [content, end] = [sseText().replace("data: [DONE]\r\n\r\n", ""), sseText(total).slice(sseText().length - 18)];
  let step = 0;
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      step += 1;
      if (step === 1) return c.enqueue(new TextEncoder().encode(content));
      if (step > 2) return c.close();
      await later;
      c.enqueue(new TextEncoder().encode(end));
    },
  });
}

/** The response, its body read (delivered), as the runtime would deliver it to a client. */
async function read(res: Response | Promise<Response>): Promise<Response> {
  const r = await res;
  await r.arrayBuffer();
  return r;
}

function bodyApp(limits: RateLimitOptions["limits"], hold?: Promise<void>) {
  return countedApp(rateLimit(rig.options({ limits })), async (c) => {
    const n = Number(c.req.header("x-usage") ?? "") || undefined;
    // what tpd has left, whichever limit the RateLimit header shows
    c.header("x-tpd-left", String(c.get("sluice")?.limits.find((l) => l.name === "tpd")?.remaining));
    switch (c.req.header("x-body")) {
      case "json":
        return c.json(n === undefined ? { id: "c1" } : usage(n));
      case "json-refused":
        return c.json({ error: "bad request" }, 400);
      case "json-big":
        return c.json({ pad: "x".repeat(1 << 20), ...usage(n ?? 0) });
      case "sse-open":
        return new Response(trickle(sseText(n), 17, hold), { headers: SSE });
      case "sse-late":
        return new Response(lateUsage(n ?? 0, hold ?? Promise.resolve()), { headers: SSE });
      default:
        return new Response(trickle(sseText(n)), { headers: SSE });
    }
  });
}

const asking2 = (body: string, usageFigure?: number) =>
  from("198.51.100.41", {
    "x-api-key": "k",
    "x-body": body,
    ...(usageFigure ? { "x-usage": String(usageFigure) } : {}),
  });

describe("rateLimit() with cost = { response = json: or sse: }", () => {
  it("json: passes the body on unchanged and settles to the figure at the path once it has been read", async () => {
    const { app } = bodyApp(bodyLimits("json:usage.total_tokens"));
    const bg = background();
    const res = await app.request("/", asking2("json", 250), {}, bg.ctx);
    expect(await res.json()).toEqual(usage(250));
    await bg.settled();
    // 1000 - 250, less this request's reserve of 100
    expect(remainingOf(await app.request("/", asking2("json"), {}, bg.ctx))).toBe(650);
  });

  it("json: charges max to a 2xx body without the field and to one past the 1 MiB cap; a 400 without it keeps the reserve", async () => {
    const { app } = bodyApp(bodyLimits("json:usage.total_tokens", 100, 300));
    const bg = background();
    expect(await (await app.request("/", asking2("json"), {}, bg.ctx)).json()).toEqual({ id: "c1" });
    const big = await (await app.request("/", asking2("json-big", 20), {}, bg.ctx)).text();
    // the client got the whole body, and its figure, but sluice stopped reading at the cap
    expect(big.length).toBeGreaterThan(1 << 20);
    expect((JSON.parse(big) as ReturnType<typeof usage>).usage.total_tokens).toBe(20);
    expect((await read(app.request("/", asking2("json-refused"), {}, bg.ctx))).status).toBe(400);
    await bg.settled();
    expect(remainingOf(await app.request("/", asking2("json", 100), {}, bg.ctx))).toBe(1000 - 300 - 300 - 100 - 100);
  });

  it("sse: holds the reserve while the stream runs, settles to its last usage after, bytes unchanged", async () => {
    let open!: () => void;
    const { app } = bodyApp(bodyLimits("sse:usage.total_tokens"), new Promise<void>((r) => (open = r)));
    const bg = background();
    const res = await app.request("/", asking2("sse-open", 321), {}, bg.ctx);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const text = res.text();
    // every event has passed, but the stream is still open: the charge is still the reserve
    await new Promise((r) => setTimeout(r, 150));
    // (its body read too: a body's settle, and so bg.settled(), waits for its delivery; it reports its reserve)
    expect(remainingOf(await read(app.request("/", asking2("json", 100), {}, bg.ctx)))).toBe(800);
    open();
    expect(await text).toBe(sseText(321));
    await bg.settled();
    // 1000 - 321 - 100 (the json request that reported its reserve), less this one's reserve
    expect(remainingOf(await app.request("/", asking2("json"), {}, bg.ctx))).toBe(479);
  });

  it("sse: charges max to a stream that ends without usage", async () => {
    const { app } = bodyApp(bodyLimits("sse:usage.total_tokens", 100, 300));
    const bg = background();
    expect(await (await app.request("/", asking2("sse"), {}, bg.ctx)).text()).toBe(sseText());
    await bg.settled();
    expect(remainingOf(await app.request("/", asking2("json", 100), {}, bg.ctx))).toBe(1000 - 300 - 100);
  });

  /**
   * Reads a stream's content, then goes away before its usage (the attack). Gives the cancel's
   * promise, which settles once the origin's body is over: sluice's own copy of it is still read.
   */
  async function cutAfterContent(res: Response): Promise<{ cancelled: Promise<void> }> {
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let seen = "";
    while (!seen.includes('"lo"')) seen += new TextDecoder().decode((await reader.read()).value);
    expect(seen).not.toContain('usage":{');
    return { cancelled: reader.cancel("client went away") };
  }

  it("sse: a stream the client cuts before its usage is read on to its end and settled to that usage", async () => {
    let usageNow!: () => void;
    const later = new Promise<void>((r) => (usageNow = r));
    const { app } = bodyApp(bodyLimits("sse:usage.total_tokens"), later);
    const bg = background();
    const { cancelled } = await cutAfterContent(await app.request("/", asking2("sse-late", 640), {}, bg.ctx));
    usageNow();
    await cancelled;
    await bg.settled();
    expect(remainingOf(await app.request("/", asking2("json", 100), {}, bg.ctx))).toBe(1000 - 640 - 100);
  });

  it("sse: a cut stream that then fails is charged max", async () => {
    let reset!: (e: Error) => void;
    const later = new Promise<void>((_, reject) => (reset = reject));
    const { app } = bodyApp(bodyLimits("sse:usage.total_tokens", 100, 300), later);
    const bg = background();
    const { cancelled } = await cutAfterContent(await app.request("/", asking2("sse-late", 640), {}, bg.ctx));
    reset(new Error("origin reset"));
    await cancelled;
    await bg.settled();
    expect(remainingOf(await app.request("/", asking2("json", 100), {}, bg.ctx))).toBe(1000 - 300 - 100);
  });

  it("sse: a response that is not an event stream is read as one JSON body (an LLM API's stream: false)", async () => {
    const { app } = bodyApp(bodyLimits("sse:usage.total_tokens"));
    const bg = background();
    await (await app.request("/", asking2("json", 90), {}, bg.ctx)).json();
    await bg.settled();
    expect(remainingOf(await app.request("/", asking2("json"), {}, bg.ctx))).toBe(1000 - 90 - 100);
  });

  it("with a concurrency limit on the route, the slot is freed once delivered and the cost settled", async () => {
    const limits = [
      ...(bodyLimits("sse:usage.total_tokens") ?? []),
      { name: "one", key: "header:x-api-key", algorithm: "concurrency", limit: 1, lease: "30s" } as const,
    ];
    const { app } = bodyApp(limits);
    const bg = background();
    const res = await app.request("/", asking2("sse", 200), {}, bg.ctx);
    // the slot is held until the body has been delivered
    expect((await read(app.request("/", asking2("json"), {}, bg.ctx))).status).toBe(429);
    expect(await res.text()).toBe(sseText(200));
    await bg.settled();
    const next = await app.request("/", asking2("json"), {}, bg.ctx);
    expect(next.status).toBe(200);
    expect(Number(next.headers.get("x-tpd-left"))).toBe(1000 - 200 - 100);
  });
});
