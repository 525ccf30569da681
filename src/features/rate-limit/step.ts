import type { Context } from "hono";
import type { Limit, Route } from "../../config/index.js";
import { ADAPTIVE_LIMIT } from "./adaptive/schema.js";
import { originFailed } from "../../origin/forward.js";
import { limitsWaived, publish, type Scope, type SluiceEnv, type Step } from "../../context.js";
import type { LimitSummary } from "./vars.js";
import { decideLimits, type DecisionPlace, type LimitRun } from "./core.js";
import { rateLimitIsolate } from "./isolate/rate-limit-isolate.js";
import { giveBack, madeWithoutRedis } from "./decision/decision.js";
import { rateLimitHeaders } from "./headers.js";
import { heldSlots, releaseSlots } from "./decision/in-flight.js";
import { observeBody } from "./cost/observe-body.js";
import {
  BodyCosts,
  chargedFromResponse,
  headerSettlements,
  readCostBody,
  settleResponseCosts,
} from "./cost/response-cost.js";
import type { LimitOutcome } from "./types.js";
import { tooManyRequests, withHeaders, type Refusal } from "./refusal.js";
import { clientLabel } from "../../metrics/labels.js";
import { idKeyOf, pseudonym } from "../../identity/pseudonym.js";
import { limitedRoute } from "../../routing/route.js";
import { logError, settleQuietly } from "../../util/log.js";

/**
 * Every limit of the route, decided in one Redis call per database (or from the isolate's
 * leases), all or nothing. A refusal is shed as the route's `on_limit` says; an admission goes on
 * (after its leaky-bucket slot, if it has one) and its response gets the `RateLimit` headers. A
 * request later answered by a replay gives back what it was charged. The in-flight slot of the
 * route's adaptive limit is freed when the origin's answer is in (what its latency measures); the
 * slots of its concurrency limits once its response body has been delivered (or the client went
 * away); both at once when a later step answered instead. `shed` answers refusals: the gateway's
 * sheds them as `on_limit` says, the middleware's refuses them (`reject`, below); `refused` is what
 * else a refusal sets off (a count towards a ban).
 */
export const rateLimitStep =
  (shed: Shed, refused: OnRefusal): Step =>
  async (c, scope, next) => {
    const route = scope.route;
    if (!route || limitsWaived(c, scope)) return next();
    const limited = limitedRoute(scope, route);
    if (limited.limits.length === 0) return next();
    const peek = route.peek !== false;
    const run = await decideRequest(scope, limited, peek);
    if (run) publish(c, scope, "sluiceLimits", summaryOf(run));
    if (!run) {
      scope.decision = "degraded";
      return next();
    }
    const { decision } = run;
    if (!run.degraded && limited.limits.some((l) => l.scope === "split"))
      scope.runtime.rebalance.nudge(scope.config, scope.stores, Date.now(), scope.defer);
    if (decision.verdict === "reject" && !peek) {
      // every refusal counts towards a ban, from the blocked-bucket cache too, however it is shed
      refused(scope, decision.blocking.limit);
      return shed(c, scope, decision);
    }
    if (decision.verdict === "shadow" && scope.meta)
      scope.meta.limit = decision.outcomes.find((o) => !o.allowed)?.limit.name ?? "-";
    scope.decision = run.degraded ? "degraded" : peek || decision.verdict === "reject" ? "allow" : decision.verdict;
    // leaky buckets hand out slots: the request waits for its own before it goes
    if (run.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, run.delayMs));
    const release = slotReleases(scope, run);
    const started = Date.now();
    try {
      await next();
    } catch (e) {
      scope.defer(release.all());
      throw e;
    }
    afterResponse(c, scope, run, release);
    reportToAdaptive(c, scope, run, Date.now() - started);
  };

/**
 * A response of an adaptive route is a sample of its origin (src/features/rate-limit/adaptive/): the gateway's own
 * measure of the origin when it forwarded (none when a later step answered instead, a replay or a
 * conflict), or, in an app, how long the handlers after this middleware took. A 4xx (a 429 from
 * the origin's own per-user limit, a 408 for a client too slow to send) is about the client's
 * request, not the origin's load: it is no sample at all, neither a failure nor a latency.
 */
function reportToAdaptive(c: Context<SluiceEnv>, scope: Scope, run: LimitRun, elapsedMs: number): void {
  const route = scope.route;
  if (!route?.adaptive || run.degraded || run.peek || run.decision.verdict === "reject") return;
  const outcome = run.decision.outcomes.find((o) => o.limit.name === ADAPTIVE_LIMIT && o.allowed);
  const bucket = outcome && run.buckets.find((b) => b.key === outcome.key);
  if (!bucket || !outcome || (scope.target && !scope.reply)) return;
  const status = c.res.status;
  if (status >= 400 && status < 500) return;
  const client = scope.facts.ip;
  const sample = scope.reply
    ? { latencyMs: scope.reply.latencyMs, failed: originFailed(scope.reply), client }
    : { latencyMs: elapsedMs, failed: status >= 500, client };
  const { adaptive, overrides } = rateLimitIsolate(scope.runtime);
  adaptive.record(
    { bucket, outcome, route, prefix: scope.config.key_prefix },
    sample,
    Date.now(),
    scope.defer,
    overrides,
  );
}

/**
 * The rate limiter's core (./core.ts) asked for this request: its facts, under `limited`'s limits.
 * The round trip goes on the request's log line.
 */
async function decideRequest(scope: Scope, limited: Route, peek: boolean): Promise<LimitRun | undefined> {
  const mode = peek ? "peek" : "take";
  const ask = { route: limited, caller: { facts: scope.facts }, mode, cameBy: scope.route?.name } as const;
  const run = await decideLimits(decisionPlaceOf(scope), ask);
  if (run?.rttMs !== undefined && scope.meta) scope.meta.rttMs = run.rttMs;
  return run;
}

/** Where a request's limits are decided (the core's place): its deployment, region and stores, the isolate's parts. */
export function decisionPlaceOf(scope: Scope): DecisionPlace {
  const { config, region, stores, runtime, defer } = scope;
  return { config, region, stores, defer, isolate: rateLimitIsolate(runtime) };
}

/**
 * A response the request went on to get carries the `RateLimit` headers (and the leaky bucket's
 * wait); one a later step answered (a replay, a refusal) does not, and a replay gives back its
 * charge: it never reached the origin. A local decision charged nothing in Redis to give back.
 */
function afterResponse(c: Context<SluiceEnv>, scope: Scope, run: LimitRun, release: SlotReleases): void {
  // a replay told by this scope (the gateway), or by an idempotency() middleware of its own: what
  // sluice's own step did, never a Sluice-Decision header an origin or a handler can send
  if (scope.decision === "replay" || c.get("sluiceReplayed") === true) {
    // the refund frees the slots too; a local decision's are this isolate's to free
    const { leases, overrides } = rateLimitIsolate(scope.runtime);
    if (!run.degraded)
      scope.defer(
        settleQuietly(giveBack(run.buckets, run.decision, leases, overrides), "refund_failed", {
          route: scope.route?.name,
        }),
      );
    else scope.defer(release.all());
    return;
  }
  if (c.error) {
    scope.defer(release.all());
    return;
  }
  // the origin's answer is in: the adaptive limit's slot counts no longer, whatever the client
  // reads (one that reads nothing held every slot until its sockets closed)
  if (release.answered) scope.defer(release.answered());
  const bodyCost = settleResponseCost(c, scope, run);
  const extra = rateLimitHeaders(run.decision.outcomes);
  if (run.delayMs > 0) extra["Sluice-Delay-Ms"] = String(run.delayMs);
  withHeaders(c.res, extra);
  const { delivered } = release;
  watchDelivery(c, scope, [...(bodyCost ? [bodyCost] : []), ...(delivered ? [{ finish: delivered }] : [])]);
}

/** Something done once the response body has been delivered (see watchDelivery), seeing its chunks on the way. */
interface DeliveryWatch {
  onChunk?: (chunk: Uint8Array) => void;
  finish: () => Promise<void>;
}

/**
 * Limits charged from the response (docs/algorithms.md, Cost from the response): the figure the origin
 * reported in a header is known with the headers, so it is settled at once (deferred). One in the
 * body (json:, sse:) is read from a copy of the body (a tee) that sluice reads itself, as fast as
 * the origin sends it, in waitUntil: a client that stops reading or goes away does not stop it.
 * The watch returned tells it when the client's delivery is over, which starts its time bound
 * (REST_BOUNDS). A 2xx response whose figure cannot be read pays `max`. A local decision's reserve
 * stays with the isolate.
 */
function settleResponseCost(c: Context<SluiceEnv>, scope: Scope, run: LimitRun): DeliveryWatch | undefined {
  if (run.degraded || run.peek) return undefined;
  const charged = chargedFromResponse(run.buckets, run.decision);
  if (charged.length === 0) return undefined;
  const { overrides } = rateLimitIsolate(scope.runtime);
  const due = headerSettlements(charged, c.res);
  if (due.length > 0) scope.defer(settleResponseCosts(due, overrides).catch(settleFailed));
  const body = BodyCosts.of(charged, c.res);
  if (!body) return undefined;
  if (!c.res.body) {
    scope.defer(settleResponseCosts(body.due(true), overrides).catch(settleFailed));
    return undefined;
  }
  const [toClient, toRead] = c.res.body.tee();
  c.res = new Response(toClient, c.res);
  let delivered: () => void = () => undefined;
  const deliveryOver = new Promise<void>((resolve) => (delivered = resolve));
  const read = readCostBody(toRead, body, deliveryOver);
  scope.defer(read.then((whole) => settleResponseCosts(body.due(whole), overrides)).catch(settleFailed));
  return { finish: async () => delivered() };
}

function settleFailed(e: unknown): void {
  logError("response_cost_settle_failed", e);
}

/** Frees a request's in-flight slots, once however often called. */
type Release = () => Promise<void>;

/** A decision's slots, each freed at its own moment (none held: undefined). */
interface SlotReleases {
  /** The adaptive limit's: when the origin's answer is in. */
  answered?: Release;
  /** The concurrency limits': once the response body has been delivered. */
  delivered?: Release;
  /** Both at once (a replay, an error). */
  all: () => Promise<void>;
}

/**
 * The releases of the slots a decision took. The adaptive limit measures the origin (its samples
 * end with the origin's response headers), so its slot is the origin's while it works, and free
 * once the origin has answered: a client that reads slowly, or not at all, is no load on the
 * origin and must not keep others out of a limit keyed `global`. A concurrency limit of the
 * route's own counts a request until its response is delivered, as documented (a stream's body
 * is the origin's work too, held back by a client that does not read; key it per client so that
 * such a client holds only its own slots).
 */
function slotReleases(scope: Scope, run: LimitRun): SlotReleases {
  const held = heldSlots(run.decision);
  const adaptive = scope.route?.adaptive !== undefined;
  const isAdaptive = (o: LimitOutcome) => adaptive && o.limit.name === ADAPTIVE_LIMIT;
  const answered = slotRelease(scope, run, held.filter(isAdaptive));
  const delivered = slotRelease(
    scope,
    run,
    held.filter((o) => !isAdaptive(o)),
  );
  return {
    ...(answered ? { answered } : {}),
    ...(delivered ? { delivered } : {}),
    all: async () => {
      await Promise.all([answered?.(), delivered?.()]);
    },
  };
}

/** The release of `held` (none: undefined): in their Redis, or in this isolate for a local decision. */
function slotRelease(scope: Scope, run: LimitRun, held: LimitOutcome[]): Release | undefined {
  if (held.length === 0) return undefined;
  const { localBuckets, overrides } = rateLimitIsolate(scope.runtime);
  let released: Promise<void> | undefined;
  return () => {
    released ??= run.degraded
      ? Promise.resolve(localBuckets.release(held))
      : settleQuietly(releaseSlots(run.buckets, held, overrides), "slot_release_failed");
    return released;
  };
}

/**
 * Runs the watches (the slots' release, a cost read from the body) when the response body has been
 * delivered: read to its end, failed, or cancelled by a client that went away; at once for a
 * response without a body. The body is wrapped once for all of them, its bytes passed on as they
 * come and unchanged. The work is handed to `defer` now (ctx.waitUntil), so it runs even though it
 * comes after the response.
 */
function watchDelivery(c: Context<SluiceEnv>, scope: Scope, watches: readonly DeliveryWatch[]): void {
  if (watches.length === 0) return;
  const res = c.res;
  // each finishes whatever another does (a throw included): a failed settle never keeps a slot held
  const finish = () => Promise.allSettled(watches.map(async (w) => w.finish())).then(() => undefined);
  if (!res.body) {
    scope.defer(finish());
    return;
  }
  let delivered: () => void = () => undefined;
  const done = new Promise<void>((resolve) => (delivered = resolve));
  const onChunk = (chunk: Uint8Array) => watches.forEach((w) => w.onChunk?.(chunk));
  c.res = new Response(observeBody(res.body, { onChunk, onEnd: delivered }), res);
  scope.defer(done.then(finish));
}

/**
 * What a refusal sets off besides its answer, handed in where the steps are composed: the gateway's
 * and `rateLimit()`'s count it towards a ban (`banOnRefusal`, src/features/access/bans.ts, which
 * writes the ban to the lists). The refusing limit is the decision's blocking one.
 */
export type OnRefusal = (scope: Scope, limit: Limit) => void;

/**
 * How a refused request is answered: the gateway sheds it as the route's `on_limit` says
 * (src/features/shedding/step.ts), the `rateLimit()` middleware, which has no `on_limit`, refuses
 * it (`reject`), so an app using it alone carries none of the queue, fallback or divert code.
 */
export type Shed = (c: Context<SluiceEnv>, scope: Scope, refusal: Refusal) => Promise<Response>;

/**
 * The refusing limit and client, for the request's log line and the dashboard: the client by the
 * keyed id of its bucket (`pseudonym`), never the bucket's plain hash, which a guess could be
 * tested against.
 */
export async function noteRefusal(scope: Scope, refusal: Refusal): Promise<void> {
  if (!scope.meta) return;
  scope.meta.limit = refusal.blocking.limit.name;
  const hash = refusal.blocking.key.slice(refusal.blocking.key.lastIndexOf(":") + 1);
  scope.meta.blockedId = await pseudonym(idKeyOf(scope.env), hash);
  scope.meta.label = clientLabel(refusal.blocking.limit, scope.facts, scope.config.labels);
}

/** `on_limit = "reject"`, the only way a refusal is answered outside the gateway: the 429 problem. */
export const reject: Shed = async (_c, scope, refusal) => {
  await noteRefusal(scope, refusal);
  throw tooManyRequests(refusal, scope.route?.name ?? "-");
};

/** The decision as the pipeline reads it: the handler's view, and how the decision is counted. */
function summaryOf(run: LimitRun): LimitSummary {
  const { outcomes } = run.decision;
  return { outcomes, degraded: run.degraded, withoutRedis: madeWithoutRedis(run.decision), decidedAt: Date.now() };
}
