import { compileLimits, loadLimits } from "../../../../test/support/limits.js";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Limit } from "../../../config/index.js";
import { InFlight } from "../algorithms/algorithms.js";
import { allowance, rateLimitHeaders } from "../headers.js";
import { heldSlots } from "./in-flight.js";
import { observeBody } from "../cost/observe-body.js";
import { LocalBuckets, type LocalBucket } from "../isolate/local.js";
import { leasableShape, MAX_IN_FLIGHT, refusalCacheable } from "../algorithms/registry.js";
import type { Decision, LimitOutcome } from "../types.js";

/*
 * In-flight caps (algorithm = "concurrency"): the configuration's fields, the isolate's own slots
 * (on_store_error = "local") against a naive count of requests in flight, the RateLimit headers,
 * and the body wrapper that frees a request's slots once its response has been delivered.
 */

const load = loadLimits;
const compile = compileLimits;

const errorOf = (def: Record<string, unknown>): string => {
  const r = load([def]);
  return r.ok ? "ok" : r.error.message;
};

const FIELD = 'SLUICE.routes[0] ("r").limits[0] ("l0")';
const C = { algorithm: "concurrency" };

describe("a concurrency limit's configuration", () => {
  it("takes limit and a lease duration, compiled to rate = burst = limit and period = lease, never leased", () => {
    const [l] = compile([{ ...C, key: "header:x-api-key", limit: 2, lease: "30s" }]) as [Limit];
    expect(l).toMatchObject({ algorithm: "concurrency", limit: 2, rate: 2, burst: 2, period: 30_000, lease: false });
    expect(leasableShape(l)).toBe(false);
    // a slot may be released at any moment: a refusal never holds until its retry-after
    expect(refusalCacheable(l)).toBe(false);
    expect(allowance(l)).toBe("allows 2 in flight at once (slots held at most 30000 ms)");
  });

  it.each([
    [{ ...C, lease: "30s" }, "limit: is required"],
    [{ ...C, limit: 2 }, 'lease: is required for concurrency: how long a slot may be held, like "30s"'],
    [{ ...C, limit: 2, lease: true }, "lease: is a duration for concurrency"],
    [{ ...C, limit: 2, lease: "soon" }, 'lease: "soon" is not a duration'],
    [{ ...C, limit: 2, lease: "500ms" }, 'lease: must be from "1s" to "1d"'],
    [{ ...C, limit: 2, lease: "2d" }, 'lease: must be from "1s" to "1d"'],
    [{ ...C, limit: 0, lease: "30s" }, "limit: "],
    [{ ...C, limit: 1.5, lease: "30s" }, "limit: "],
    [{ ...C, limit: MAX_IN_FLIGHT + 1, lease: "30s" }, `limit: must be at most ${MAX_IN_FLIGHT}`],
    [{ ...C, limit: 2, lease: "30s", rate: 5 }, "rate: does not apply to concurrency"],
    [{ ...C, limit: 2, lease: "30s", period: "1s" }, "period: does not apply to concurrency"],
    [{ ...C, limit: 2, lease: "30s", burst: 2 }, "burst: does not apply to concurrency"],
    [{ ...C, limit: 2, lease: "30s", cost: 2 }, "cost: does not apply to concurrency: a request holds one slot"],
    [{ ...C, limit: 2, lease: "30s", cost: "header:x-cost", max_cost: 2 }, "cost: does not apply to concurrency"],
    [{ ...C, limit: 2, lease: "30s", tier: "header:x-plan", rates: { a: "1/1s" } }, "tier: does not apply"],
    [{ ...C, limit: 2, lease: "30s", scope: "split" }, 'scope: cannot be "split" for concurrency'],
    [{ ...C, limit: 2, lease: "30s", warmup: "1s" }, "warmup: applies to token_bucket only"],
    [{ ...C, limit: 2, lease: "30s", nodelay: true }, "nodelay: applies to leaky_bucket only"],
    [{ rate: 5 }, "period: is required for token_bucket"],
    [{ period: "1s", algorithm: "fixed_window" }, "rate: is required for fixed_window"],
    [{ rate: 5, period: "1s", limit: 3 }, "limit: applies to concurrency only"],
    [{ rate: 5, period: "1s", lease: "30s" }, "lease: is true or false for token_bucket"],
  ])("%j is refused, naming the field: %s", (def, message) => {
    expect(errorOf(def)).toContain(`${FIELD}.${message}`);
  });

  it("accepts cost = 1 written out, shadow, global scope, and a route that mixes it with rate limits", () => {
    const limits = compile([
      { rate: 100, period: "1m", key: "header:x-api-key" },
      { ...C, limit: 2, lease: "1m", key: "header:x-api-key", cost: 1, scope: "global", shadow: true },
    ]);
    expect(limits.map((l) => [l.algorithm, l.rate, l.period, l.lease])).toEqual([
      ["token_bucket", 100, 60_000, true],
      ["concurrency", 2, 60_000, false],
    ]);
  });
});

const T0 = 1_700_000_000_000; // ms, an isolate's Date.now()

const bucketOf = (limit: Limit, slot: string, client = "c"): LocalBucket => ({
  limit,
  key: `sluice:r:${limit.name}:${client}`,
  params: { rate: limit.rate, period: limit.period, burst: limit.burst, cost: limit.cost },
  ...(limit.algorithm === "concurrency" ? { slot } : {}),
});

describe("the isolate's own in-flight slots (on_store_error = local)", () => {
  it("admits `limit` at once, refuses the next until one is released or expires, with an honest retry-after", () => {
    const [l] = compile([{ ...C, limit: 3, lease: "10s" }]) as [Limit];
    const local = new LocalBuckets();
    const take = (slot: string, at: number) => local.decide([bucketOf(l, slot)], at);
    expect([take("a", T0), take("b", T0 + 1), take("c", T0 + 2)].map((d) => d.verdict)).toEqual([
      "allow",
      "allow",
      "allow",
    ]);
    // a slot taken again under its own id counts as held: the 4th call is refused whoever makes it
    expect(take("b", T0 + 2)).toMatchObject({ verdict: "reject", outcomes: [{ remaining: 0, slot: "b" }] });
    const refused = take("d", T0 + 3);
    // the soonest slot (a, taken at T0) expires at T0 + 10 s
    expect(refused).toMatchObject({ verdict: "reject", blocking: { retryAfterMs: 10_000 - 3, remaining: 0 } });
    expect(heldSlots(refused), "a refusal holds no slot").toEqual([]);
    local.release([bucketOf(l, "a")]);
    expect(take("d", T0 + 4).verdict).toBe("allow");
    expect(take("e", T0 + 5)).toMatchObject({ verdict: "reject", blocking: { retryAfterMs: 10_000 + 1 - 5 } });
    // b expires at T0 + 10 001 (nobody released it)
    expect(take("e", T0 + 10_000).verdict).toBe("reject");
    expect(take("e", T0 + 10_001).verdict).toBe("allow");
  });

  it("a peek takes no slot and names none; a refusal by a rate limit in the same route takes no slot", () => {
    const [rate, slots] = compile([
      { algorithm: "fixed_window", rate: 2, period: "1m" },
      { ...C, limit: 5, lease: "1m" },
    ]) as [Limit, Limit];
    const local = new LocalBuckets();
    const both = (slot: string) => [bucketOf(rate, slot), bucketOf(slots, slot)];
    const peek = local.decide(both("p"), T0, "peek");
    expect(peek.outcomes[1]).toMatchObject({ allowed: true, remaining: 5 });
    expect(peek.outcomes[1]?.slot).toBeUndefined();
    expect(local.decide(both("a"), T0).verdict).toBe("allow");
    expect(local.decide(both("b"), T0).verdict).toBe("allow");
    const refused = local.decide(both("c"), T0);
    expect(refused).toMatchObject({ verdict: "reject", blocking: { limit: { name: "l0" } } });
    // a, b hold slots; c took none
    expect(local.decide([bucketOf(slots, "x")], T0, "peek").outcomes[0]?.remaining).toBe(3);
  });

  it("never lets more than `limit` be in flight, against a naive count of requests taken and not yet finished", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.array(fc.record({ gap: fc.integer({ min: 0, max: 4_000 }), finish: fc.nat(), end: fc.boolean() })),
        (limit, steps) => {
          const [l] = compile([{ ...C, limit, lease: "10s" }]) as [Limit];
          const local = new LocalBuckets();
          // slot id → when it was taken (ms): in flight until released or 10 s old
          const inFlight = new Map<string, number>();
          let t = T0;
          steps.forEach((s, n) => {
            t += s.gap;
            for (const [id, at] of inFlight) if (at + 10_000 <= t) inFlight.delete(id);
            const ids = [...inFlight.keys()];
            const done = ids[s.finish % Math.max(1, ids.length)];
            if (s.end && done !== undefined) {
              local.release([bucketOf(l, done)]);
              inFlight.delete(done);
            }
            const d = local.decide([bucketOf(l, `r${n}`)], t);
            expect(d.verdict === "allow", `${inFlight.size} in flight of ${limit}`).toBe(inFlight.size < limit);
            expect(d.outcomes[0]?.remaining).toBe(Math.max(0, limit - inFlight.size - (d.verdict === "allow" ? 1 : 0)));
            if (d.verdict === "allow") inFlight.set(`r${n}`, t);
          });
        },
      ),
      { numRuns: 300 },
    );
  });

  it("the model renews a slot taken again under its own id rather than counting it twice", () => {
    const m = new InFlight({ rate: 2, periodUs: 1_000_000, burst: 2 });
    m.peek(0, 1, "a").commit();
    const again = m.peek(500_000, 1, "a");
    expect(again.after).toEqual({ remaining: 1, resetMs: 1_000 });
    again.commit();
    expect(m.live(600_000)).toEqual([["a", 1_500_000]]);
  });
});

const outcome = (limit: Limit, o: Partial<LimitOutcome>): LimitOutcome => ({
  limit,
  key: "k",
  cost: 1,
  allowed: true,
  remaining: 0,
  retryAfterMs: 0,
  resetMs: 0,
  delayMs: 0,
  ...o,
});

describe("RateLimit headers and held slots of a concurrency limit", () => {
  it("says q = the limit, w = the lease in whole seconds, r = free slots, t = when the last held slot expires", () => {
    const [slots, rate] = compile([
      { ...C, limit: 2, lease: "1500ms" },
      { rate: 100, period: "1m" },
    ]) as [Limit, Limit];
    const headers = rateLimitHeaders([
      outcome(rate, { remaining: 50, resetMs: 30_000 }),
      outcome(slots, { remaining: 1, resetMs: 1_500, slot: "s" }),
    ]);
    expect(headers).toEqual({ "RateLimit-Policy": '"l0";q=2;w=2', RateLimit: '"l0";r=1;t=2' });
  });

  it("an admitted decision holds the slots of the concurrency limits that allowed; a refused one holds none", () => {
    const [slots, shadowSlots] = compile([
      { ...C, limit: 2, lease: "30s" },
      { ...C, limit: 1, lease: "30s", shadow: true },
    ]) as [Limit, Limit];
    const allowed = outcome(slots, { slot: "a" });
    const shadowRefused = outcome(shadowSlots, { slot: "a", allowed: false });
    const admitted: Decision = { verdict: "shadow", outcomes: [allowed, shadowRefused] };
    expect(heldSlots(admitted)).toEqual([allowed]);
    const refused: Decision = { verdict: "reject", outcomes: [allowed], blocking: allowed, cached: false };
    expect(heldSlots(refused)).toEqual([]);
  });
});

describe("observeBody: a response body that tells when it has been delivered", () => {
  /** What frees the slots: `settled` once the body has been delivered. */
  const whenSettled = (body: ReadableStream<Uint8Array>, settled: () => void) => observeBody(body, { onEnd: settled });
  const bodyOf = (chunks: string[], fail?: Error) =>
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (const c of chunks) controller.enqueue(new TextEncoder().encode(c));
        if (fail) controller.error(fail);
        else controller.close();
      },
    });

  it("passes every byte on, and settles once, when the reader reaches the end", async () => {
    let settled = 0;
    const body = whenSettled(bodyOf(["ab", "cd"]), () => settled++);
    const reader = body.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("ab");
    expect(settled).toBe(0);
    expect(
      await new Response(
        new ReadableStream({
          pull: async (c) => {
            const r = await reader.read();
            if (r.done) c.close();
            else c.enqueue(r.value);
          },
        }),
      ).text(),
    ).toBe("cd");
    expect(settled).toBe(1);
  });

  it("settles when the reader cancels (a client that went away) and cancels the source", async () => {
    let settled = 0;
    let cancelled: unknown;
    const source = new ReadableStream<Uint8Array>({
      pull: (c) => c.enqueue(new Uint8Array([1])),
      cancel: (reason) => void (cancelled = reason),
    });
    const reader = whenSettled(source, () => settled++).getReader();
    await reader.read();
    await reader.cancel("gone");
    expect([settled, cancelled]).toEqual([1, "gone"]);
  });

  it("settles when the source errs, and passes the error on", async () => {
    let settled = 0;
    const body = whenSettled(bodyOf(["x"], new Error("origin reset")), () => settled++);
    await expect(new Response(body).text()).rejects.toThrow("origin reset");
    expect(settled).toBe(1);
  });
});
