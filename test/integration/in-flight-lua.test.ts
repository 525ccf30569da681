import { readFileSync } from "node:fs";
import { compileLimits } from "../support/limits.js";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import type { Limit } from "../../src/config/index.js";
import { InFlight, type AlgoModel } from "../../src/features/rate-limit/algorithms/algorithms.js";
import { scriptCall, type ScriptBucket, type ScriptMode } from "../../src/features/rate-limit/decision/decision.js";
import { modelOf } from "../../src/features/rate-limit/algorithms/registry.js";
import { clockArgs, loadDecideWithTestClock } from "../support/test-clock.js";
import { fileRedis } from "./stack.js";

/*
 * decide.lua's concurrency branch (in-flight slots) against the slot-set model of
 * src/features/rate-limit/algorithms/algorithms.ts (`InFlight`: slot id → expiry), on a test clock, as
 * algorithms-lua.test.ts does for the other algorithms: every reply figure of every take, peek,
 * refund and release must match, the stored value must list exactly the model's live slots, and a
 * refusal or a peek must leave the bucket byte for byte as it was.
 */

const db = fileRedis();
let sha: string;
beforeAll(async () => {
  sha = await loadDecideWithTestClock(db.redis);
});

const compile = compileLimits;

const modelFor = (l: Limit): AlgoModel =>
  modelOf({ algorithm: l.algorithm, rate: l.rate, periodUs: l.period * 1000, burst: l.burst });

let run = 0;
const freshKeys = (n: number) => {
  run++;
  return Array.from({ length: n }, (_, i) => `inflight:${run}:${i}`);
};

/**
 * KEYS and ARGV as production builds them (the slot on every concurrency bucket), plus the clock;
 * `override` is everybody's override of the limits ("rate:burst:period_ms:until_ms").
 */
function callOf(limits: Limit[], keys: string[], t: number, mode: ScriptMode, slot: string, override?: string) {
  const buckets = limits.map((limit, i): ScriptBucket => ({
    limit,
    key: keys[i] as string,
    ...(limit.algorithm === "concurrency" ? { slot } : {}),
    ...(override === undefined ? {} : { override: { everybody: override } }),
  }));
  const call = scriptCall(buckets, mode);
  return { keys: call.keys, args: [...call.args, ...clockArgs(t)] };
}

type Step =
  | { run: [limits: Limit[], keys: string[], t: number, mode: ScriptMode, slot: string, override?: string] }
  | { get: string };

/** Several commands in one pipeline, run in order with nothing in between (this Redis is the file's own). */
async function steps(list: Step[]): Promise<unknown[]> {
  const p = db.redis.pipeline();
  for (const s of list) {
    if ("get" in s) p.get(s.get);
    else {
      const call = callOf(...s.run);
      p.evalsha(sha, call.keys, call.args);
    }
  }
  return p.exec();
}

/** The live slots a stored value lists at `t`, as the model gives them: [id, expiry], soonest first. */
function stored(value: unknown, t: number): Array<[string, number]> {
  if (value === null) return [];
  const m = /^c:(.*)$/.exec(String(value));
  expect(m, `a concurrency value: ${String(value)}`).not.toBeNull();
  const list = (m?.[1] ?? "").split(",").filter((s) => s !== "");
  return list
    .map((s): [string, number] => {
      const [id, expiry] = s.split("@");
      return [id as string, Number(expiry)];
    })
    .filter(([, e]) => e > t)
    .sort((a, b) => a[1] - b[1]);
}

const T0 = 1_700_000_000_000_000;
const LEASES = ["1s", "1500ms", "7s", "30s", "1m"] as const;

const inFlightDef = fc.record({
  algorithm: fc.constant("concurrency"),
  limit: fc.integer({ min: 1, max: 6 }),
  lease: fc.constantFrom(...LEASES),
  shadow: fc.constantFrom(false, false, false, true),
});
/** Halfway through, an operator's override sets the limit to this (slots held beyond it stay). */
const loweredArb = fc.option(fc.integer({ min: 1, max: 6 }), { nil: undefined });

/**
 * One call: what it does, when (a gap of `when`'s kind), and which slot it names. Gaps: 0, sub-ms,
 * up to 0.6 leases / limit (faster than slots expire: the limit is reached), exactly at a live
 * slot's expiry or a µs before it, exactly at the last refusal's retry-after, or up to 1.5 leases
 * (every slot may have expired).
 */
const opArb = fc.record({
  kind: fc.constantFrom<ScriptMode>("take", "take", "take", "take", "release", "release", "refund", "peek"),
  when: fc.constantFrom(0, 1, 2, 2, 2, 3, 4, 5, 6),
  x: fc.double({ min: 0, max: 1, noNaN: true }),
  pick: fc.nat(),
});
type Op = { kind: ScriptMode; when: number; x: number; pick: number };

function gapOf(op: Op, l: Limit, model: InFlight, t: number, retryMs: number | undefined): number {
  const live = model.live(t);
  const soonest = live[op.pick % Math.max(1, live.length)]?.[1];
  if (op.when === 0) return 0;
  if (op.when === 1) return Math.floor(op.x * 2000);
  if ((op.when === 3 || op.when === 4) && soonest !== undefined) return soonest - t - (op.when - 3);
  if (op.when === 5 && retryMs !== undefined && retryMs >= 0) return retryMs * 1000;
  if (op.when === 6) return Math.floor(op.x * 1.5 * l.period * 1000);
  return Math.floor((op.x * 0.6 * l.period * 1000) / l.rate);
}

interface Tally {
  admitted: number;
  refused: number;
  released: number;
}

/**
 * Plays `ops` on one concurrency limit against the script and the model, checking every figure and
 * the stored slots; from halfway on, with the limit overridden to `lowered`, if given.
 */
async function play(l: Limit, ops: Op[], start: number, tally: Tally, lowered?: number): Promise<void> {
  const figures = { rate: l.rate, periodUs: l.period * 1000, burst: l.burst };
  const model = new InFlight(figures);
  const [key] = freshKeys(1) as [string];
  const taken: string[] = [];
  let t = start;
  let retryMs: number | undefined;
  let override: string | undefined;
  for (const [n, op] of ops.entries()) {
    if (lowered !== undefined && n === Math.floor(ops.length / 2)) {
      override = `${lowered}:${lowered}:${l.period}:4000000000000`;
      figures.rate = figures.burst = lowered;
    }
    t += gapOf(op, l, model, t, retryMs);
    const deciding = op.kind === "take" || op.kind === "peek";
    const slot = deciding ? `s${n}` : (taken[op.pick % (taken.length + 1)] ?? "gone");
    const got = await steps([{ get: key }, { run: [[l], [key], t, op.kind, slot, override] }, { get: key }]);
    const [before, reply, after] = got as [unknown, number[], unknown];
    const at = `${op.kind} of ${slot} at ${t - start} µs`;
    if (deciding) {
      const p = checkDecision(model, l, op.kind, slot, t, reply, at);
      if (p.charged) taken.push(slot);
      else expect(after, "a refusal or a peek writes nothing").toEqual(before);
      if (p.refusedMs !== undefined) retryMs = p.refusedMs;
      tally.admitted += p.charged ? 1 : 0;
      tally.refused += p.refusedMs === undefined ? 0 : 1;
    } else {
      model.release(slot);
      const s = model.peek(t, 1).before;
      expect(reply, at).toEqual([1, 1, s.remaining, 0, s.resetMs, 0, 0, 0, 0]);
      tally.released++;
    }
    expect(stored(after, t), "the stored slots are the model's").toEqual(model.live(t));
  }
}

/** A take or peek's reply against the model (committed there when charged): whether it was, and a refused take's retry-after. */
function checkDecision(
  model: InFlight,
  l: Limit,
  mode: ScriptMode,
  slot: string,
  t: number,
  reply: number[],
  at: string,
) {
  const p = model.peek(t, 1, slot);
  const charged = mode === "take" && p.allowed;
  const state = charged ? p.after : p.before;
  const admitted = p.allowed || l.shadow ? 1 : 0;
  expect(reply, at).toEqual([admitted, p.allowed ? 1 : 0, state.remaining, p.retryAfterMs, state.resetMs, 0, 0, 0, 0]);
  if (charged) p.commit();
  return { charged, refusedMs: mode === "take" && !p.allowed ? p.retryAfterMs : undefined };
}

const startArb = fc.integer({ min: 0, max: 100_000_000_000 }).map((o) => T0 + o);

describe("decide.lua's concurrency branch against the slot-set model", () => {
  it("takes, peeks, refunds and releases: every reply figure and every stored slot match", async () => {
    const tally: Tally = { admitted: 0, refused: 0, released: 0 };
    await fc.assert(
      fc.asyncProperty(
        inFlightDef,
        fc.array(opArb, { minLength: 5, maxLength: 50 }),
        startArb,
        loweredArb,
        (d, ops, start, lowered) => play(compile([d])[0] as Limit, ops, start, tally, lowered),
      ),
      { numRuns: 150 },
    );
    // every kind of call, plenty of times (about 700 takes, 170 refusals, 700 releases and refunds)
    expect(Math.min(tally.admitted, tally.refused, tally.released)).toBeGreaterThan(100);
  });

  it("a refused take passes at exactly now + retry-after when no slot is released, and not a ms sooner", async () => {
    let probed = 0;
    await fc.assert(
      fc.asyncProperty(
        inFlightDef,
        fc.array(opArb, { minLength: 1, maxLength: 30 }),
        startArb,
        async (d, ops, start) => {
          const l = compile([{ ...d, shadow: false }])[0] as Limit;
          const [key] = freshKeys(1) as [string];
          let t = start;
          for (const [n, op] of ops.entries()) {
            t += Math.floor((op.x * 1.5 * l.period * 1000) / l.rate) * (op.when % 2);
            const [, allowed, , retry] = (await steps([{ run: [[l], [key], t, "take", `s${n}`] }]))[0] as number[];
            if (allowed === 1) continue;
            const r = retry as number;
            expect(r).toBeGreaterThan(0);
            probed++;
            const [then, sooner] = (await steps([
              { run: [[l], [key], t + r * 1000, "peek", "p"] },
              { run: [[l], [key], t + (r - 1) * 1000, "peek", "p"] },
            ])) as [number[], number[]];
            expect(then[1], `passes ${r} ms later`).toBe(1);
            expect(sooner[1], `refused ${r - 1} ms later`).toBe(0);
          }
        },
      ),
      { numRuns: 80 },
    );
    expect(probed).toBeGreaterThan(50);
  });

  it("with a rate limit in the same call, all or nothing: a refusal by either takes neither a slot nor a token", async () => {
    const rateDef = fc.record({
      algorithm: fc.constantFrom("token_bucket", "fixed_window", "sliding_window"),
      rate: fc.integer({ min: 1, max: 8 }),
      period: fc.constantFrom("500ms", "1s", "7s"),
      shadow: fc.constantFrom(false, false, true),
    });
    const seen = { admitted: 0, byRate: 0, bySlots: 0 };
    await fc.assert(
      fc.asyncProperty(
        inFlightDef,
        rateDef,
        fc.boolean(),
        fc.array(opArb, { minLength: 1, maxLength: 40 }),
        startArb,
        async (c, r, slotsFirst, ops, start) => {
          const limits = compile(slotsFirst ? [c, r] : [r, c]);
          const models = limits.map(modelFor);
          const keys = freshKeys(2);
          const taken: string[] = [];
          let t = start;
          for (const [n, op] of ops.entries()) {
            t += Math.floor(op.x * 300_000) * (op.when % 3);
            if (op.kind === "release" && taken.length > 0) {
              const slot = taken[op.pick % taken.length] as string;
              await steps([{ run: [limits, keys, t, "release", slot] }]);
              models.forEach((m) => m.release?.(slot));
              continue;
            }
            const slot = `s${n}`;
            const before = await steps(keys.map((k) => ({ get: k })));
            const [reply] = (await steps([{ run: [limits, keys, t, "take", slot] }])) as [number[]];
            const after = await steps(keys.map((k) => ({ get: k })));
            const peeks = models.map((m) => m.peek(t, 1, slot));
            const admitted = peeks.every((p, i) => p.allowed || limits[i]!.shadow);
            const expected = [admitted ? 1 : 0];
            peeks.forEach((p) => {
              const state = admitted && p.allowed ? p.after : p.before;
              expected.push(p.allowed ? 1 : 0, state.remaining, p.retryAfterMs, state.resetMs, 0, 0, 0, 0);
            });
            expect(reply, `take at ${t - start} µs`).toEqual(expected);
            peeks.forEach((p, i) => (!admitted || !p.allowed) && expect(after[i]).toEqual(before[i]));
            if (admitted) {
              peeks.forEach((p) => p.commit());
              taken.push(slot);
              seen.admitted++;
            } else {
              const rate = limits.findIndex((l) => l.algorithm !== "concurrency");
              if (!peeks[rate]!.allowed && !limits[rate]!.shadow) seen.byRate++;
              else seen.bySlots++;
            }
          }
        },
      ),
      { numRuns: 120 },
    );
    expect(Math.min(seen.admitted, seen.byRate, seen.bySlots)).toBeGreaterThan(30);
  });

  it("refuses a take, refund or release without a well-formed slot id, before writing anything", async () => {
    const [l] = compile([{ algorithm: "concurrency", limit: 2, lease: "30s" }]) as [Limit];
    const [key] = freshKeys(1) as [string];
    for (const bad of ["", "a,b", "a@1", "x".repeat(65), "é"]) {
      for (const mode of ["take", "refund", "release"] as const) {
        const call = callOf([l], [key], T0, mode, bad);
        await expect(db.redis.evalsha(sha, call.keys, call.args), `${mode} "${bad}"`).rejects.toThrow(/slot id/);
      }
    }
    expect(await db.redis.get(key)).toBeNull();
    // a peek takes no slot, so it needs no id
    const peek = callOf([l], [key], T0, "peek", "");
    expect(await db.redis.evalsha(sha, peek.keys, peek.args)).toEqual([1, 1, 2, 0, 0, 0, 0, 0, 0]);
  });

  it("keeps each bucket's TTL at the time until its last slot expires, and deletes it when the last one goes", async () => {
    const [l] = compile([{ algorithm: "concurrency", limit: 3, lease: "30s" }]) as [Limit];
    const [key] = freshKeys(1) as [string];
    const real = readFileSync("lua/decide.lua", "utf8");
    const take = (slot: string) => {
      const call = scriptCall([{ limit: l, key, slot }], "take");
      return db.redis.eval(real, call.keys, call.args);
    };
    await take("a");
    const ttl = await db.redis.pttl(key);
    expect(ttl).toBeGreaterThan(29_000);
    expect(ttl).toBeLessThanOrEqual(30_000);
    await take("b");
    const release = (slot: string) => {
      const call = scriptCall([{ limit: l, key, slot }], "release");
      return db.redis.eval(real, call.keys, call.args) as Promise<number[]>;
    };
    expect((await release("a"))[2]).toBe(2);
    expect(String(await db.redis.get(key))).toMatch(/^c:b@\d{16}$/);
    expect((await release("b"))[2]).toBe(3);
    expect(await db.redis.exists(key)).toBe(0);
  });
});
