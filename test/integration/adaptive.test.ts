import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { startQueueingOrigin, type QueueingOrigin } from "@sluice/dev";
import { asHash } from "../../src/store/replies.js";
import { call, sleep, useStack } from "./stack.js";

/*
 * The adaptive limit end to end: a Worker in front of an origin that queues (dev/queueing-origin.ts:
 * 4 requests at full speed in 100 ms, slower as more share them, failing past 16 in flight), under
 * an open-loop load of twice what it can serve. Without a limit it collapses; a sweep of fixed
 * in-flight limits finds the best one; the adaptive limit, with no target given, must come within
 * 20% of that goodput with its p99 below the latency at the knee, and climb back after the origin
 * has been slow for a while.
 *
 * Timing-sensitive (latencies and rates on the real clock): it runs in `npm test`'s serial pass.
 */

const MODEL = { servers: 4, serviceMs: 100, knee: 16 };
/** What the origin serves at most (40/s), and the latency of a request at the knee (400 ms). */
const CAPACITY = (MODEL.servers * 1000) / MODEL.serviceMs;
const KNEE_MS = (MODEL.serviceMs * MODEL.knee) / MODEL.servers;
const RATE = 2 * CAPACITY;
const FIXED = [2, 4, 8, 16, 24];
/** How long the learnt limit is given to converge from a cold start (30 windows of 500 ms: three probes). */
const LEARN_S = 15;
/**
 * The bound on climbing back to 80% of the healthy limit after the origin recovers: from 3 or so,
 * one step (+max(1, 0.5 × √limit)) per 500 ms window, less the probes at half the limit.
 */
const RECOVERY_S = 20;

const SLUICE: SluiceInput = {
  key_prefix: "adapt",
  // decisions are Redis's even on a loaded machine (a degraded one would not limit)
  timeout_ms: 2_000,
  routes: [
    { name: "none", match: "/none/*" },
    ...FIXED.map((limit) => ({
      name: `fixed-${limit}`,
      match: `/fixed-${limit}/*`,
      limits: [{ name: "origin", key: "global", algorithm: "concurrency" as const, limit, lease: "30s" }],
    })),
    { name: "learned", match: "/learned/*", adaptive: { latency: "p90" as const, interval: "500ms" } },
  ],
};

let origin: QueueingOrigin;
const rig = useStack({
  sluice: SLUICE,
  origin: async () => (origin = await startQueueingOrigin(MODEL)),
});

interface Run {
  /** 200s per second of load. */
  goodput: number;
  /** p99 latency of the 200s, ms. */
  p99: number;
  shares: { ok: number; refused: number; failed: number };
}

/**
 * Requests every 1/RATE s for `warmupS` + `seconds`, not waiting for answers: what came back of
 * those sent after the warm-up (so that no case counts the head start of an idle origin), the
 * origin's stats zeroed when the warm-up ends.
 */
async function load(path: string, seconds: number, warmupS = 0): Promise<Run> {
  const sent: Array<Promise<{ status: number; ms: number }>> = [];
  const started = Date.now();
  const measured = setTimeout(() => origin.reset(), warmupS * 1000);
  for (let i = 0; Date.now() - started < (warmupS + seconds) * 1000; i++) {
    const at = Date.now();
    // many users, as the origin's load would be (one client's share of the samples is bounded)
    const ip = `198.18.${Math.floor(i / 250) % 4}.${(i % 250) + 1}`;
    const answer = call(rig.mf, `${path}${i}`, { ip }).then((r) => ({ status: r.status, ms: Date.now() - at }));
    if (at - started >= warmupS * 1000) sent.push(answer);
    else void answer.catch(() => undefined);
    await sleep(Math.max(0, started + ((i + 1) * 1000) / RATE - Date.now()));
  }
  clearTimeout(measured);
  const answers = await Promise.all(sent);
  const ok = answers
    .filter((a) => a.status === 200)
    .map((a) => a.ms)
    .sort((a, b) => a - b);
  const share = (f: (s: number) => boolean) => answers.filter((a) => f(a.status)).length / answers.length;
  await drain();
  return {
    goodput: ok.length / seconds,
    p99: ok[Math.min(ok.length - 1, Math.floor(ok.length * 0.99))] ?? Infinity,
    shares: { ok: share((s) => s === 200), refused: share((s) => s === 429), failed: share((s) => s >= 500) },
  };
}

/** Waits until the origin has nothing in flight (a case must not pay for the one before). */
async function drain(): Promise<void> {
  for (let i = 0; i < 100 && origin.inFlight() > 0; i++) await sleep(50);
}

/** The learned limit as the region's Redis holds it (lua/adaptive.lua's state). */
async function learnedLimit(): Promise<number> {
  const [key] = (await rig.redis.keys("adapt:learned:adaptive:state:*")) as string[];
  return key ? Math.floor(Number(asHash(await rig.redis.hgetall(key)).limit)) : NaN;
}

const log = (line: string) => process.env.SLUICE_TEST_LOGS && console.log(line);

describe("an adaptive in-flight limit in front of a queueing origin", () => {
  it(`under ${RATE}/s (twice capacity): no limit collapses; adaptive (no target) keeps goodput within 20% of the best fixed limit, p99 below the knee's ${KNEE_MS} ms`, async () => {
    // every route once, so that no case pays for a cold isolate or script
    for (const path of ["/none/", ...FIXED.map((l) => `/fixed-${l}/`), "/learned/"]) await call(rig.mf, `${path}warm`);
    await drain();
    const fixed = new Map<number, Run>();
    for (const limit of FIXED) fixed.set(limit, await load(`/fixed-${limit}/`, 3, 1));
    const best = Math.max(...[...fixed.values()].map((r) => r.goodput));
    const none = await load("/none/", 3, 1);
    // learning from a cold start under overload (the warm-up): the first windows measure the
    // origin already queueing at the initial 10; each probe (after every 8 windows, two at half the
    // limit) learns a lower unloaded latency, until the limit holds the p90 within 1.5 × the true one
    const adaptive = await load("/learned/", 5, LEARN_S);
    const maxInFlight = origin.stats().maxInFlight;
    log(
      `fixed: ${[...fixed].map(([l, r]) => `${l} → ${r.goodput.toFixed(1)}/s p99 ${r.p99} ms`).join(", ")}; ` +
        `none: ${none.goodput.toFixed(1)}/s (${(none.shares.failed * 100).toFixed(0)}% failed); ` +
        `adaptive: ${adaptive.goodput.toFixed(1)}/s p99 ${adaptive.p99} ms, origin at most ${maxInFlight} in flight, limit ${await learnedLimit()}`,
    );
    // the sweep found an origin worth protecting: a good fixed limit serves most of its capacity
    expect(best).toBeGreaterThan(CAPACITY * 0.6);
    expect(none.goodput).toBeLessThan(best * 0.5);
    expect(adaptive.goodput).toBeGreaterThanOrEqual(best * 0.8);
    expect(adaptive.p99).toBeLessThan(KNEE_MS);
    expect(maxInFlight).toBeLessThanOrEqual(MODEL.knee);
    expect(adaptive.shares.failed).toBeLessThan(0.02);
  }, 120_000);

  it(`when the origin slows down the limit falls; when it recovers, the limit is back within ${RECOVERY_S} s`, async () => {
    await load("/learned/", 2);
    const healthy = await learnedLimit();
    origin.setModel({ serviceMs: 3 * MODEL.serviceMs });
    // the lowest the limit went while the origin was slow (polled: a probe may lift it again)
    let slowed = healthy;
    const watch = setInterval(() => {
      learnedLimit().then(
        (l) => (slowed = Math.min(slowed, l)),
        () => undefined,
      );
    }, 250);
    // the first windows at the new latency are what moves the limit (requests then in flight may
    // meet a knee the limit stood close to); once it has moved, the origin must not be failing
    await load("/learned/", 1.5);
    const slow = await load("/learned/", 2.5);
    clearInterval(watch);
    origin.setModel({ serviceMs: MODEL.serviceMs });
    const recovered = Date.now();
    let seconds = 0;
    for (; seconds < RECOVERY_S && (await learnedLimit()) < healthy * 0.8; seconds++) await load("/learned/", 1);
    const back = (Date.now() - recovered) / 1000;
    log(
      `limit ${healthy} healthy, ${slowed} after 4 s at 3× latency (p99 ${slow.p99} ms); back to ${await learnedLimit()} in ${back.toFixed(1)} s`,
    );
    expect(slowed).toBeLessThan(healthy);
    expect(slow.shares.failed).toBeLessThan(0.02);
    expect(await learnedLimit()).toBeGreaterThanOrEqual(healthy * 0.8);
    expect(seconds).toBeLessThan(RECOVERY_S);
  }, 90_000);
});
