import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { startQueueingOrigin, type QueueingOrigin } from "@sluice/dev";
import { asHash } from "../../src/store/replies.js";
import { call, sleep, useStack } from "./stack.js";

/*
 * The adaptive limit end to end: a Worker in front of an origin that queues (dev/queueing-origin.ts:
 * 4 requests at full speed in 200 ms, slower as more share them, failing past 16 in flight), under
 * an open-loop load of twice what it can serve (40/s: a load a loaded machine still sends). Without a limit it collapses; the adaptive limit,
 * with no target given, must never let it reach its knee, and must fall when the origin slows down
 * and climb back after it recovers.
 *
 * What this asserts is counted at the origin and read from Redis, so that a loaded machine cannot
 * bend it: how close the learnt limit's goodput comes to the best fixed cap, and its latency, are
 * figures of the bench (`npm run bench`, section 11: the same origin and load, each fixed cap, no
 * limit, and the adaptive limit with and without a target).
 */

const MODEL = { servers: 4, serviceMs: 200, knee: 16 };
/** What the origin serves at most (20/s). */
const CAPACITY = (MODEL.servers * 1000) / MODEL.serviceMs;
const RATE = 2 * CAPACITY;
/** How long the learnt limit is given to converge from a cold start (30 windows of 500 ms: three probes). */
const LEARN_S = 15;
/**
 * How much slower the origin turns in the second test: more than the learnt reference can follow
 * before the limit moves (1.5 × a base that a probe at most doubles), so that the limit falls
 * whatever the base was.
 */
const SLOWER = 5;
/**
 * The cap on climbing back to 80% of the healthy limit after the origin recovers, in seconds of
 * load: from 1 or so, one step (+max(1, 0.5 × √limit)) per window, which closes once 500 ms old
 * with 10 responses in it (two seconds at a limit of 1). That is several seconds on an idle
 * machine; a loaded one serves fewer responses a second through the same limit, and its windows
 * close later. The same cap bounds the wait for the limit to fall once the origin is slow.
 */
const RECOVERY_S = 60;

const SLUICE: SluiceInput = {
  key_prefix: "adapt",
  // decisions are Redis's even on a loaded machine (a degraded one would not limit)
  timeout_ms: 10_000,
  routes: [
    { name: "none", match: "/none/*" },
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
  /** Answers decided without Redis (a store error): they do not count towards the in-flight limit. */
  degraded: number;
}

/**
 * Requests every 1/RATE s for `warmupS` + `seconds`, not waiting for answers: what came back of
 * those sent after the warm-up (so that no case counts the head start of an idle origin), the
 * origin's stats zeroed when the warm-up ends.
 */
async function load(path: string, seconds: number, warmupS = 0): Promise<Run> {
  const sent: Array<Promise<{ status: number; ms: number; decision: string | null }>> = [];
  const started = Date.now();
  const measured = setTimeout(() => origin.reset(), warmupS * 1000);
  for (let i = 0; Date.now() - started < (warmupS + seconds) * 1000; i++) {
    const at = Date.now();
    // many users, as the origin's load would be (one client's share of the samples is bounded)
    const ip = `198.18.${Math.floor(i / 250) % 4}.${(i % 250) + 1}`;
    const answer = call(rig.mf, `${path}${i}`, { ip }).then((r) => ({
      status: r.status,
      ms: Date.now() - at,
      decision: r.headers.get("sluice-decision"),
    }));
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
    degraded: answers.filter((a) => a.decision === "degraded").length,
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
  it(`under ${RATE}/s (twice capacity): no limit collapses the origin; the adaptive limit (no target) never lets it reach its knee of ${MODEL.knee} in flight, and serves`, async () => {
    // each route once, so that no case pays for a cold isolate or script
    for (const path of ["/none/", "/learned/"]) await call(rig.mf, `${path}warm`);
    await drain();
    const none = await load("/none/", 3, 1);
    const unprotected = origin.stats();
    // learning from a cold start under overload (the warm-up): the first windows measure the
    // origin already queueing at the initial 10; each probe (after every 8 windows, two at half the
    // limit) learns a lower unloaded latency, until the limit holds the p90 within 1.5 × the true one
    const adaptive = await load("/learned/", 5, LEARN_S);
    const protectedStats = origin.stats();
    const limit = await learnedLimit();
    log(
      `none: ${none.goodput.toFixed(1)}/s, origin ${JSON.stringify(unprotected)}; ` +
        `adaptive: ${adaptive.goodput.toFixed(1)}/s p99 ${adaptive.p99} ms, ${adaptive.degraded} degraded, shares ${JSON.stringify(adaptive.shares)}, origin ${JSON.stringify(protectedStats)}, limit ${limit}`,
    );
    // the load is worth protecting against: unprotected, the origin fails most of what it gets
    expect(unprotected.failed).toBeGreaterThan(unprotected.ok);
    // protected: never past the knee, so (almost) nothing fails
    expect(protectedStats.maxInFlight).toBeLessThanOrEqual(MODEL.knee);
    expect(adaptive.shares.failed).toBeLessThan(0.02);
    // and it serves (how much, against the best fixed cap, is the bench's figure)
    expect(adaptive.shares.ok).toBeGreaterThan(0);
  }, 240_000);

  it(`when the origin slows down the limit falls; when it recovers, the limit climbs back (within ${RECOVERY_S} s of load each)`, async () => {
    await load("/learned/", 2);
    const healthy = await learnedLimit();
    origin.setModel({ serviceMs: SLOWER * MODEL.serviceMs });
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
    let fell = 0;
    for (; fell < RECOVERY_S && slowed >= healthy; fell++) await load("/learned/", 1);
    const slow = await load("/learned/", 2.5);
    clearInterval(watch);
    origin.setModel({ serviceMs: MODEL.serviceMs });
    const recovered = Date.now();
    let seconds = 0;
    for (; seconds < RECOVERY_S && (await learnedLimit()) < healthy * 0.8; seconds++) await load("/learned/", 1);
    const back = (Date.now() - recovered) / 1000;
    log(
      `limit ${healthy} healthy, ${slowed} after ${fell} s at ${SLOWER}× latency (then p99 ${slow.p99} ms); back to ${await learnedLimit()} in ${back.toFixed(1)} s`,
    );
    expect(slowed).toBeLessThan(healthy);
    expect(slow.shares.failed).toBeLessThan(0.02);
    expect(await learnedLimit()).toBeGreaterThanOrEqual(healthy * 0.8);
    expect(seconds).toBeLessThan(RECOVERY_S);
  }, 300_000);
});
