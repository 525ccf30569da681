import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { TOKEN, useStack } from "../../../test/integration/stack.js";
import type { Route } from "../../config/index.js";
import type { OriginReply } from "../../origin/forward.js";
import { Problem, problemStatus } from "../../problem.js";
import { StoreError } from "../../store/deadline.js";
import { StoreRegistry, type Store } from "../../store/redis.js";
import type { Renewal } from "../../util/renewal.js";
import { claim, giveBackUnsentJob, takeUpJob, type Claim, type GuardSubject, type JobGuards } from "./core.js";
import { idempotencySettings } from "./idempotency/schema.js";
import type { GuardPlace } from "./place.js";
import { sessionSettings } from "./session/schema.js";

/*
 * The guard core, held by a model (fast-check's `commands`), against a real Redis behind the
 * project's Upstash-REST bridge. Random sequences of arrivals and duplicates (two isolates, two
 * callers), origin answers that are fast, failing, never sent, cut after sending, or late past
 * `origin_timeout` (answered, failing or never), outcome writes and claims that fail before or
 * after they reach Redis, holders that die, leases and windows that pass, queued jobs delivered
 * and delivered again, session calls with and without a key. After every step:
 * - at most one origin run per key: a key is never granted while another call of it may still
 *   act, nor once an origin acted on it (a key is never free after the origin acted);
 * - a duplicate is answered with its own key's answer (the one run that acted), or told to wait
 *   (409), never run;
 * - one call per session at a time: a session's lock is never granted while a live call holds it.
 * At the end of each sequence every key an origin acted on ends answered (its replay) or held
 * (409 indeterminate), never free.
 *
 * Every key reconciles (issue 33): a duplicate meeting an indeterminate key asks the model's
 * origin, which knows what it did: an answer (the one it gave, or for a run whose answer was lost,
 * one it gives now and keeps), a `404` only for a key no run acted on (the origin saying it did not
 * act, so a grant then is no second run), or nothing useful while it is down (`ReconcileDown`).
 *
 * Time is the scripts' clock: the bridge refuses TIME in scripts (as ElastiCache Serverless does),
 * so every script runs on the clock the isolate passes, `Date.now()`, which the test sets; no real
 * sleep decides anything. Renewals run when the model says a live holder's renewal is due.
 *
 * `SLUICE_MODEL_RUNS=2000 npx vitest run src/features/guard/guard.model.test.ts` runs the long
 * form (docs/testing.md); `npm test` runs a bounded number of sequences.
 */

const RUNS = Number(process.env.SLUICE_MODEL_RUNS ?? 25);
const SEED = process.env.SLUICE_MODEL_SEED === undefined ? undefined : Number(process.env.SLUICE_MODEL_SEED);

const rig = useStack({ origin: false, scriptTime: "refuse" });

const LEASE_MS = 1_000;
const JOB_LIFE_MS = 5_000;
const KEYS = ["k0", "k1", "k2"];
const CALLERS = ["caller-a", "caller-b"];
const SESSIONS = ["s0", "s1"];

const idem = idempotencySettings().parse(idemInput());
/** Each caller's keys are asked about on a host of its own: the model's origin tells them apart by it. */
const RECONCILE_HOST = (caller: string): string => `${caller}.reconcile.model`;
const idemOf = new Map(
  CALLERS.map((c) => [
    c,
    idempotencySettings().parse({ ...idemInput(), reconcile: `https://${RECONCILE_HOST(c)}/{key}` }),
  ]),
);
function idemInput() {
  return { lease: "1s", ttl: "1h", replays: "100000/1m" };
}
const session = sessionSettings().parse({ key: "header:x-session", lease: "1s" });

/** A store whose calls of the named ops fail, before or after they reach Redis, as often as told. */
interface Faults {
  /** op (ARGV[0]) -> failures left, and whether each lands in Redis first (its reply lost) */
  left: Map<string, { n: number; after: boolean }>;
}

function faulty(store: Store, faults: Faults): Store {
  const run: Store["run"] = async (script, keys, args) => {
    const op = String(args[0]);
    const f = faults.left.get(op);
    const failing = f !== undefined && f.n > 0;
    if (failing) f.n--;
    if (failing && !f.after) throw new StoreError("error", `injected: ${op} refused`);
    const reply = await store.run(script, keys, args);
    if (failing) throw new StoreError("error", `injected: ${op} reply lost`);
    return reply;
  };
  return new Proxy(store, {
    get(target, p) {
      if (p === "run") return run;
      const v: unknown = Reflect.get(target, p, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/** A renewal the model runs when a live holder's is due; stopped by the core, or never run again once its holder died. */
interface ManualRenewal {
  renew: () => Promise<boolean>;
  stopped: boolean;
}

/** One guarded call the model follows from its claim to its outcome. */
interface Call {
  id: number;
  /** `caller/key`, or none for a session call without a key. */
  key?: string;
  session?: string;
  claim?: Claim;
  job?: JobGuards;
  phase: "running" | "late" | "done" | "dead";
  late?: (res: Response | undefined) => void;
  renewals: ManualRenewal[];
  background: Array<Promise<unknown>>;
  /** When the call's holder last renewed (or took) its guards. */
  renewedAt: number;
  /**
   * Until when the call's session lock may not go to another call, in the model: for ever while
   * the call runs or awaits its late answer; once its outcome is known, not at all; once it is
   * unknown (cut, no late answer) or its holder died, until its lease runs out from its last renewal.
   */
  lockUntil: number;
}

/** What the model knows of each key and session. */
interface World {
  now: number;
  /** keys an origin acted on (or may have: cut, no answer, holder died), with the answer it gave, if one */
  acted: Map<string, { answer?: string }>;
  calls: Call[];
  jobs: Call[];
  faults: Faults;
  stores: Store[];
  prefix: string;
  seq: number;
  log: string[];
  /** Whether the origin's reconcile endpoint answers (else a 503: still unknown). */
  reconcileUp: boolean;
}

/** The model's origin answering its reconcile endpoint from what it did (`w.acted`). */
function reconcileAnswer(w: World, url: URL): Response {
  if (!w.reconcileUp) return new Response("down", { status: 503 });
  const caller = CALLERS.find((c) => RECONCILE_HOST(c) === url.host) as string;
  const key = `${caller}/${decodeURIComponent(url.pathname.slice(1))}`;
  const did = w.acted.get(key);
  if (!did) return new Response(null, { status: 404 });
  // a run whose answer was lost (cut, no late answer, its holder died): the origin still knows it
  did.answer ??= `reconciled answer of ${key}`;
  return new Response(did.answer, { status: 200, headers: { "sluice-original-status": "201" } });
}

/** fetch as the model sees it: the reconcile hosts are the model's origin, the rest (the store's bridge) the real one. */
function modelFetch(world: () => World, real: typeof fetch): typeof fetch {
  return (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    return url.host.endsWith(".reconcile.model") ? Promise.resolve(reconcileAnswer(world(), url)) : real(input, init);
  };
}

function liveHolders(w: World, pick: (c: Call) => string | undefined, value: string): Call[] {
  return [...w.calls, ...w.jobs].filter((c) => pick(c) === value && (c.phase === "running" || c.phase === "late"));
}

function placeFor(w: World, call: Call, isolate: number): GuardPlace {
  const store = faulty(w.stores[isolate] as Store, w.faults);
  return {
    prefix: w.prefix,
    claimStore: store,
    outcomeStore: store,
    defer: (p) => void call.background.push(p),
    renewing: (renew): Renewal => {
      const r: ManualRenewal = { renew, stopped: false };
      call.renewals.push(r);
      let done = (): void => undefined;
      const finished = new Promise<void>((resolve) => (done = resolve));
      return { stop: () => ((r.stopped = true), done()), done: finished };
    },
    outcomeRetry: { startMs: 1, maxMs: 1, budgetMs: 3 },
  };
}

/** Waits for a call's work after the response: outcome writes, releases (a late answer's once it came). */
async function drained(call: Call): Promise<void> {
  while (call.background.length > 0) await Promise.allSettled(call.background.splice(0));
}

/** One renewal, as the real loop runs it: a failed one (an injected fault) is one lost, the loop goes on (src/util/renewal.ts). */
async function renewOnce(r: ManualRenewal): Promise<void> {
  try {
    await r.renew();
  } catch (e) {
    if (!(e instanceof StoreError)) throw e;
  }
}

/** The time moves on by `ms`, live holders renewing every half lease meanwhile (as their isolates would). */
async function advance(w: World, ms: number): Promise<void> {
  for (let left = ms; left > 0; left -= LEASE_MS / 2) {
    for (const c of [...w.calls, ...w.jobs]) {
      if (c.phase === "dead") continue;
      if (c.renewals.some((r) => !r.stopped)) c.renewedAt = w.now;
      for (const r of c.renewals) if (!r.stopped) await renewOnce(r);
    }
    w.now += Math.min(left, LEASE_MS / 2);
    vi.setSystemTime(w.now);
  }
}

const ROUTE = "orders";
const jobRoute = {
  name: ROUTE,
  idempotency: idem,
  session,
  queue: { max_age: JOB_LIFE_MS, status_ttl: JOB_LIFE_MS },
  origin_timeout: 1_000,
} as unknown as Route;

function subjectOf(caller: string, key: string | undefined, sessionId: string | undefined): GuardSubject {
  return {
    route: ROUTE,
    key:
      key === undefined
        ? undefined
        : { key, fingerprint: `fp:${key}`, principal: caller, settings: idemOf.get(caller) ?? idem },
    session:
      sessionId === undefined
        ? undefined
        : { identity: sessionId, label: sessionId, principal: caller, settings: session },
  };
}

/** The checks at a grant: nobody else may be acting on the key or holding the session, and no origin acted on the key. */
function checkGrant(w: World, call: Call): void {
  if (call.key !== undefined) {
    expect(w.acted.has(call.key), `${call.key} granted after an origin acted on it`).toBe(false);
    expect(
      liveHolders(w, (c) => c.key, call.key).filter((c) => c !== call),
      `${call.key} granted while in flight`,
    ).toEqual([]);
  }
  if (call.session !== undefined) {
    const all = [...w.calls, ...w.jobs];
    const holding = all.filter((c) => c !== call && c.session === call.session && c.lockUntil > w.now);
    expect(
      holding.map((c) => c.id),
      `session ${call.session} granted while another call holds it`,
    ).toEqual([]);
  }
}

/** A duplicate's answer: its own key's, the one an origin gave. */
async function checkReplay(w: World, key: string | undefined, body: string): Promise<void> {
  expect(key, "a call without a key was answered with a replay").toBeDefined();
  expect(w.acted.get(key as string)?.answer, `${key} replayed an answer no run of it gave`).toBe(body);
}

/** A call arrives: claims its key and session (a duplicate gets the replay or a 409). */
class Arrive implements fc.AsyncCommand<World, World> {
  constructor(
    readonly caller: number,
    readonly key: number | undefined,
    readonly session: number | undefined,
    readonly isolate: number,
  ) {}
  check = () => true;
  async run(_m: World, w: World): Promise<void> {
    const caller = CALLERS[this.caller] as string;
    const key = this.key === undefined ? undefined : `${caller}/${KEYS[this.key]}`;
    const sessionId = this.session === undefined ? undefined : `${caller}/${SESSIONS[this.session]}`;
    if (key === undefined && sessionId === undefined) return;
    const call: Call = {
      id: ++w.seq,
      key,
      session: sessionId,
      phase: "running",
      renewals: [],
      background: [],
      renewedAt: w.now,
      lockUntil: Infinity,
    };
    const subject = subjectOf(caller, key && KEYS[this.key as number], sessionId && SESSIONS[this.session as number]);
    try {
      const g = await claim(subject, placeFor(w, call, this.isolate), { lifeMs: 30_000 });
      if (g.kind === "replay") {
        await checkReplay(w, key, new TextDecoder().decode(g.answer.body ?? new Uint8Array()));
      } else {
        checkGrant(w, call);
        call.claim = g.claim;
        w.calls.push(call);
      }
    } catch (e) {
      // told to wait (409 in flight, indeterminate, busy session) or the store failed (503): never run
      if (!(e instanceof Problem)) throw e;
      expect([409, 503]).toContain(problemStatus(e.init));
      // a claim whose reply was lost is given back after the response
      await drained(call);
    }
  }
  toString = () => `arrive(${this.caller}, ${this.key}, ${this.session}, iso ${this.isolate})`;
}

type OriginDoes = "answer" | "5xx" | "unreachable" | "broken" | "timeout";

/** The origin does something with a running call; the core settles it. */
class Origin implements fc.AsyncCommand<World, World> {
  constructor(
    readonly pick: number,
    readonly does: OriginDoes,
  ) {}
  check = () => true;
  async run(_m: World, w: World): Promise<void> {
    const running = w.calls.filter((c) => c.phase === "running");
    const call = running[this.pick % Math.max(1, running.length)];
    if (!call?.claim) return;
    const body = `answer of ${call.key ?? "-"} by call ${call.id}`;
    const sent = new Headers();
    let reply: OriginReply;
    if (this.does === "answer") reply = { response: new Response(body, { status: 201 }), outcome: "answered", sent };
    else if (this.does === "5xx")
      reply = { response: new Response("oops", { status: 503 }), outcome: "answered", sent };
    else if (this.does === "unreachable")
      reply = { response: new Response(null, { status: 502 }), outcome: "unreachable", sent };
    else if (this.does === "broken") reply = { response: new Response(null, { status: 502 }), outcome: "broken", sent };
    else {
      const late = new Promise<Response | undefined>((resolve) => (call.late = resolve));
      reply = { response: new Response(null, { status: 504 }), outcome: "timeout", sent, late };
    }
    if (this.does === "answer" || this.does === "broken") acted(w, call, this.does === "answer" ? body : undefined);
    await (await call.claim.settleWith({ reply })).arrayBuffer();
    if (this.does === "timeout") {
      call.phase = "late";
      return;
    }
    call.phase = "done";
    call.lockUntil = this.does === "broken" ? call.renewedAt + LEASE_MS : 0;
    await drained(call);
  }
  toString = () => `origin(${this.pick}, ${this.does})`;
}

/** An origin acted on the call's key (with this answer, or none to replay). */
function acted(w: World, call: Call, answer: string | undefined): void {
  if (call.key === undefined) return;
  expect(w.acted.has(call.key), `${call.key} ran twice at the origin`).toBe(false);
  w.acted.set(call.key, { answer });
}

/** A timed-out call's late answer comes (an answer, a 5xx), or never does. */
class LateAnswer implements fc.AsyncCommand<World, World> {
  constructor(
    readonly pick: number,
    readonly does: "answer" | "5xx" | "none",
  ) {}
  check = () => true;
  async run(_m: World, w: World): Promise<void> {
    const waiting = w.calls.filter((c) => c.phase === "late");
    const call = waiting[this.pick % Math.max(1, waiting.length)];
    if (!call?.late) return;
    const body = `late answer of ${call.key ?? "-"} by call ${call.id}`;
    if (this.does !== "5xx") acted(w, call, this.does === "answer" ? body : undefined);
    call.late(
      this.does === "none"
        ? undefined
        : new Response(this.does === "answer" ? body : "oops", { status: this.does === "answer" ? 201 : 500 }),
    );
    call.phase = "done";
    call.lockUntil = this.does === "none" ? call.renewedAt + LEASE_MS : 0;
    await drained(call);
  }
  toString = () => `late(${this.pick}, ${this.does})`;
}

/** A holder's isolate dies: it renews nothing more and never settles; its origin may have acted. */
class Die implements fc.AsyncCommand<World, World> {
  constructor(readonly pick: number) {}
  check = () => true;
  async run(_m: World, w: World): Promise<void> {
    const live = w.calls.filter((c) => c.phase === "running" || c.phase === "late");
    const call = live[this.pick % Math.max(1, live.length)];
    if (!call) return;
    call.phase = "dead";
    call.lockUntil = call.renewedAt + LEASE_MS;
    if (call.key !== undefined && !w.acted.has(call.key)) w.acted.set(call.key, {});
  }
  toString = () => `die(${this.pick})`;
}

/** The origin's reconcile endpoint goes down (503s: the outcome stays unknown) or comes back. */
class ReconcileDown implements fc.AsyncCommand<World, World> {
  constructor(readonly down: boolean) {}
  check = () => true;
  async run(_m: World, w: World): Promise<void> {
    w.reconcileUp = !this.down;
  }
  toString = () => `reconcile(${this.down ? "down" : "up"})`;
}

/** Time passes: a little, past a lease, or past a queued job's life. */
class Tick implements fc.AsyncCommand<World, World> {
  constructor(readonly ms: number) {}
  check = () => true;
  async run(_m: World, w: World): Promise<void> {
    await advance(w, this.ms);
  }
  toString = () => `tick(${this.ms})`;
}

/** The next calls of a script op fail, before or after they reach Redis. */
class Fail implements fc.AsyncCommand<World, World> {
  constructor(
    readonly op: string,
    readonly n: number,
    readonly after: boolean,
  ) {}
  check = () => true;
  async run(_m: World, w: World): Promise<void> {
    w.faults.left.set(this.op, { n: this.n, after: this.after });
  }
  toString = () => `fail(${this.op}, ${this.n}, ${this.after ? "after" : "before"})`;
}

/** A request goes to the queue: its key claimed and its lock taken for the job's life, unrenewed. */
class Enqueue implements fc.AsyncCommand<World, World> {
  constructor(
    readonly caller: number,
    readonly key: number,
    readonly session: number | undefined,
  ) {}
  check = () => true;
  async run(_m: World, w: World): Promise<void> {
    const caller = CALLERS[this.caller] as string;
    const key = `${caller}/${KEYS[this.key]}`;
    const sessionId = this.session === undefined ? undefined : `${caller}/${SESSIONS[this.session]}`;
    const call: Call = {
      id: ++w.seq,
      key,
      session: sessionId,
      phase: "done",
      renewals: [],
      background: [],
      renewedAt: w.now,
      lockUntil: 0,
    };
    const subject = subjectOf(caller, KEYS[this.key], sessionId && SESSIONS[this.session as number]);
    try {
      const g = await claim(subject, placeFor(w, call, 0), { lifeMs: JOB_LIFE_MS, queued: true });
      if (g.kind === "replay") await checkReplay(w, key, new TextDecoder().decode(g.answer.body ?? new Uint8Array()));
      else {
        const { claim: ticket, session: lock } = g.claim.tickets;
        call.job = { id: `job-${call.id}`, route: ROUTE, claim: ticket, session: lock, sluiceHeaders: {} };
        // the job holds its session's lock for its life, unrenewed, until the consumer takes it up
        if (sessionId !== undefined) call.lockUntil = w.now + JOB_LIFE_MS;
        w.jobs.push(call);
      }
    } catch (e) {
      if (!(e instanceof Problem)) throw e;
      expect([409, 503]).toContain(problemStatus(e.init));
    }
    await drained(call);
  }
  toString = () => `enqueue(${this.caller}, ${this.key}, ${this.session})`;
}

/** The consumer delivers a job (again, for a redelivery): takes its guards up, sends it, settles them. */
class Deliver implements fc.AsyncCommand<World, World> {
  constructor(
    readonly pick: number,
    readonly dropped: boolean,
  ) {}
  check = () => true;
  async run(_m: World, w: World): Promise<void> {
    const job = w.jobs[this.pick % Math.max(1, w.jobs.length)];
    if (!job?.job) return;
    const place = {
      config: { key_prefix: w.prefix, ledger_length: 1000 },
      stores: { fixed: () => w.stores[1] as Store },
      defer: (p: Promise<unknown>) => void job.background.push(p),
      renewing: placeFor(w, job, 1).renewing,
    };
    if (this.dropped) {
      // past max_age: dropped unsent, its guards given back only if no delivery of it began
      await giveBackUnsentJob(job.job, place);
      job.lockUntil = 0;
      return;
    }
    const taken = await takeUpJob(job.job, jobRoute, place);
    // refused: its guards are no longer its own (or a copy started it), and nothing is sent
    if (taken.kind === "refused") return void (job.lockUntil = Math.min(job.lockUntil, w.now));
    job.phase = "running";
    job.renewedAt = w.now;
    job.lockUntil = Infinity;
    checkGrant(w, job);
    const body = `answer of ${job.key ?? "-"} by job ${job.id}`;
    acted(w, job, body);
    const reply: OriginReply = {
      response: new Response(body, { status: 201 }),
      outcome: "answered",
      sent: new Headers(),
    };
    // settled, its renewals stopped once the writes landed
    await taken.claim.settleWith(reply);
    job.phase = "done";
    job.lockUntil = 0;
    await drained(job);
  }
  toString = () => `deliver(${this.pick}${this.dropped ? ", dropped" : ""})`;
}

const commands = [
  fc
    .tuple(fc.nat(1), fc.option(fc.nat(2), { nil: undefined }), fc.option(fc.nat(1), { nil: undefined }), fc.nat(1))
    .map(([c, k, s, i]) => new Arrive(c, k, s, i)),
  fc
    .tuple(fc.nat(5), fc.constantFrom<OriginDoes>("answer", "answer", "5xx", "unreachable", "broken", "timeout"))
    .map(([p, d]) => new Origin(p, d)),
  fc
    .tuple(fc.nat(5), fc.constantFrom("answer", "5xx", "none") as fc.Arbitrary<"answer" | "5xx" | "none">)
    .map(([p, d]) => new LateAnswer(p, d)),
  fc.nat(5).map((p) => new Die(p)),
  fc.constantFrom(100, 400, 1_200, 3_000, 6_000).map((ms) => new Tick(ms)),
  fc.boolean().map((down) => new ReconcileDown(down)),
  fc
    .tuple(
      fc.constantFrom("claim", "complete", "hold", "release", "release_unsent", "acquire"),
      fc.nat(5),
      fc.boolean(),
    )
    .map(([op, n, after]) => new Fail(op, n, after)),
  fc.tuple(fc.nat(1), fc.nat(2), fc.option(fc.nat(1), { nil: undefined })).map(([c, k, s]) => new Enqueue(c, k, s)),
  fc.tuple(fc.nat(5), fc.boolean()).map(([p, d]) => new Deliver(p, d)),
];

let run = 0;

/** The end of a sequence: late answers never come, work drains, then every key an origin acted on is answered or held. */
async function finalCheck(w: World): Promise<void> {
  // what is still running never answers: its connection breaks (the origin may have acted)
  for (const c of w.calls.filter((c) => c.phase === "running")) {
    acted(w, c, undefined);
    const reply: OriginReply = {
      response: new Response(null, { status: 502 }),
      outcome: "broken",
      sent: new Headers(),
    };
    await (await c.claim?.settleWith({ reply }))?.arrayBuffer();
  }
  for (const c of w.calls) if (c.phase === "late") c.late?.(undefined);
  for (const c of [...w.calls, ...w.jobs]) if (c.phase !== "dead") await drained(c);
  for (const [key, did] of w.acted) {
    const [caller, k] = key.split("/") as [string, string];
    const probe: Call = {
      id: ++w.seq,
      key,
      phase: "running",
      renewals: [],
      background: [],
      renewedAt: w.now,
      lockUntil: Infinity,
    };
    w.faults.left.clear();
    try {
      const g = await claim(subjectOf(caller, k, undefined), placeFor(w, probe, 0), { lifeMs: 30_000 });
      expect(g.kind, `${key}, acted on, was free at the end`).toBe("replay");
      // the answer read after the probe: its reconciliation may have had the origin tell a lost one
      if (g.kind === "replay") expect(new TextDecoder().decode(g.answer.body ?? new Uint8Array())).toBe(did.answer);
    } catch (e) {
      if (!(e instanceof Problem)) throw e;
      expect(problemStatus(e.init), `${key}: ${e.init.detail}`).toBe(409);
    }
  }
}

describe("the guard core, held by a model against Redis", () => {
  let world: World | undefined;
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.stubGlobal(
      "fetch",
      modelFetch(() => world as World, globalThis.fetch),
    );
  });
  afterEach(() => {
    vi.useRealTimers();
    vi.unstubAllGlobals();
  });

  it(
    `keeps one origin run per key and one call per session through ${RUNS} random sequences`,
    async () => {
      const registries = [new StoreRegistry(), new StoreRegistry()];
      const connection = { url: rig.stack.bridge.url, token: TOKEN };
      const stores = registries.map((r, i) => r.store({ name: `iso${i}`, connection, budget: 10_000 }));
      let sequences = 0;
      await fc.assert(
        fc.asyncProperty(fc.commands(commands, { maxCommands: 40, size: "max" }), async (cmds) => {
          sequences++;
          const now = 1_800_000_000_000 + ++run * 86_400_000;
          vi.setSystemTime(now);
          const w: World = {
            now,
            acted: new Map(),
            calls: [],
            jobs: [],
            faults: { left: new Map() },
            stores,
            prefix: `model${run}`,
            seq: 0,
            log: [],
            reconcileUp: true,
          };
          world = w;
          await fc.asyncModelRun(() => ({ model: w, real: w }), cmds);
          await finalCheck(w);
        }),
        { numRuns: RUNS, seed: SEED },
      );
      expect(sequences).toBeGreaterThanOrEqual(RUNS);
      // a cap for a sequence that hangs, not a budget: about 0.1 s a sequence on a loaded 2-core machine
    },
    120_000 + RUNS * 1_000,
  );
});
