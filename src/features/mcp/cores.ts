/*
 * The MCP adapter's one seam onto sluice's capabilities: every call it makes into the rate
 * limiter's core (`decideLimits`, src/features/rate-limit/core.ts) and the guard core (`claim`,
 * src/features/guard/core.ts) goes through this file, and nothing else of src/features/mcp/
 * imports them. The adapter speaks in calls (a tool, its limits, its key); this file says what
 * each is in the cores' terms (a place, an ask, a subject), so that moving a core is a change
 * here alone.
 */
import type { Limit, Route } from "../../config/index.js";
import type { RequestValue, Scope } from "../../context.js";
import { decideLimits, type LimitRun } from "../rate-limit/core.js";
import { decisionPlaceOf, noteRefusal, type OnRefusal } from "../rate-limit/step.js";
import { giveBack } from "../rate-limit/decision/decision.js";
import { rateLimitHeaders } from "../rate-limit/headers.js";
import { heldSlots, releaseSlots } from "../rate-limit/decision/in-flight.js";
import { rateLimitIsolate } from "../rate-limit/isolate/rate-limit-isolate.js";
import { tooManyRequests } from "../rate-limit/refusal.js";
import { claim, guardFailure, type Claim, type Guarding } from "../guard/core.js";
import { idempotencySettings } from "../guard/idempotency/schema.js";
import type { IdempotencySettings } from "../guard/idempotency/request-key.js";
import { fingerprint, parseKey } from "../guard/idempotency/key.js";
import type { StoredAnswer } from "../guard/idempotency/key-claim.js";
import { callLifeMs } from "../guard/place.js";
import { askerOf, guardPlaceOf, traceOf } from "../guard/scope-subject.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { settleQuietly } from "../../util/log.js";
import type { McpSettings } from "./schema.js";

export type { Claim, Guarding, StoredAnswer };

/** A call's limits decided: the run (for its headers and what follows the answer), or a refusal to answer with. */
export type CallLimits = { run?: LimitRun; refusal?: Problem };

/**
 * The route's `limits` that apply to the call (`applies`: those of its tool) decided for one call
 * by the rate limiter's core, cost as configured: a refusal is the 429 problem the route would
 * answer (its detail, `Retry-After`, `RateLimit` headers), handed to `refused` (a count towards a
 * ban) as the route's refusal would be. No run: Redis failed and the deployment fails open. (A
 * request whose limits are waived, `limitsWaived` in src/context.ts, is not asked about: the
 * adapter does not call this.)
 */
export async function decideCall(
  scope: Scope,
  route: Route,
  applies: (limit: Limit) => boolean,
  refused: OnRefusal,
): Promise<CallLimits> {
  if (!route.limits.some(applies)) return {};
  const ask = { route, caller: { facts: scope.facts }, mode: "take", applies } as const;
  const run = await decideLimits(decisionPlaceOf(scope), ask);
  if (run?.rttMs !== undefined && scope.meta) scope.meta.rttMs = run.rttMs;
  if (!run) {
    scope.decision = "degraded";
    return {};
  }
  if (run.decision.verdict === "reject") {
    refused(scope, run.decision.blocking.limit);
    await noteRefusal(scope, run.decision);
    scope.decision = "reject";
    return { run, refusal: tooManyRequests(run.decision, route.name) };
  }
  scope.decision = run.degraded ? "degraded" : run.decision.verdict;
  return { run };
}

/** The `RateLimit` headers of a call's decision (none without one). */
export function callLimitHeaders(run: LimitRun | undefined): Record<string, string> {
  return run ? rateLimitHeaders(run.decision.outcomes) : {};
}

/**
 * Once a call is answered: a replay gives back what its decision charged (it never reached the
 * server); any other answer frees its in-flight slots.
 */
export function afterCall(
  scope: Pick<Scope, "runtime" | "route" | "defer">,
  run: LimitRun | undefined,
  replayed: boolean,
): void {
  if (!run || run.decision.verdict === "reject") return;
  const { leases, overrides, localBuckets } = rateLimitIsolate(scope.runtime);
  const route = scope.route?.name;
  if (run.degraded) {
    localBuckets.release(heldSlots(run.decision));
    return;
  }
  const work = replayed
    ? giveBack(run.buckets, run.decision, leases, overrides)
    : releaseSlots(run.buckets, heldSlots(run.decision), overrides);
  scope.defer(settleQuietly(work, replayed ? "refund_failed" : "slot_release_failed", { route }));
}

let defaults: IdempotencySettings | undefined;

/**
 * How a guarded call's claim is held: the route's `idempotency` table (its principal, lease,
 * replays, max_body, on_origin_error) or its defaults, keeping the result `window`; a key is
 * always given (explicit or derived from the call), never read from a body.
 */
function guardSettings(route: Route, mcp: McpSettings): IdempotencySettings {
  defaults ??= idempotencySettings().parse({});
  const table = route.idempotency ?? defaults;
  // no reconciliation (issue 33) for tool calls: a kept result is a JSON-RPC response, which the
  // reconcile endpoint's contract (an HTTP answer by key) does not give
  const { reconcile: _none, ...kept } = table;
  return { ...kept, ttl: mcp.window, wait: 0, derive: false, required: false, ignore: [], methods: ["POST"] };
}

/** Whether `key` is a valid idempotency key (1-255 printable ASCII characters, bare or quoted): its text, else the problem. */
export function explicitKey(text: string): { key: string } | { problem: string } {
  const parsed = parseKey(text);
  if (!parsed.ok) return { problem: parsed.detail };
  return parsed.key === undefined ? { problem: "the idempotency key is empty" } : { key: parsed.key };
}

/** What a guarded call is claimed as: its key, its canonical tool and arguments (the fingerprint), its tool (for the ledger). */
export interface CallSubject {
  key: string;
  canonical: string;
  tool: string;
}

/**
 * Claims a guarded call with the guard core (one Lua call): its key, the fingerprint of its
 * principal, tool and canonical arguments (and the endpoint's path and query), its tool for the
 * ledger. It is `held` (settle the claim with the server's reply, or abandon it), or its stored
 * result is the answer (`replay`). Throws a `Problem`: the call in flight, its outcome
 * indeterminate, its key reused with other arguments, the replay bound, the store down (503).
 * `wait`: how long a repeat of a call in flight polls for its result first.
 */
export async function claimCall(
  scope: RequestValue & Pick<Scope, "route" | "trace">,
  route: Route,
  mcp: McpSettings,
  call: CallSubject,
  wait = 0,
): Promise<Guarding> {
  const settings = { ...guardSettings(route, mcp), wait };
  try {
    const { principal, client } = await askerOf(scope.facts, settings)();
    const canonical = new TextEncoder().encode(call.canonical);
    const fp = await fingerprint("POST", scope.forwardPath, scope.facts.url.search, principal, canonical);
    // the scope's route, whose session the MCP step took: a call holds no session lock
    const place = guardPlaceOf(scope, scope.route, traceOf(scope));
    const trail = place.trail && { ...place.trail, tool: call.tool };
    const key = { key: call.key, fingerprint: fp, principal, client, settings };
    return await claim({ route: route.name, key }, { ...place, trail }, { lifeMs: callLifeMs(route) });
  } catch (e) {
    throw guardFailure(e);
  }
}

/** Whether a claim's refusal says the call is still running (a repeat may wait for it). */
export function stillRunning(e: unknown): boolean {
  return e instanceof Problem && e.init.type === PROBLEMS.requestInFlight;
}

/** The kinds of refusal a guarded call's claim throws, by what the figures count them as. */
export const CLAIM_REFUSALS = {
  indeterminate: PROBLEMS.outcomeIndeterminate,
  mismatch: PROBLEMS.idempotencyKeyReused,
  notStored: PROBLEMS.completedAnswerNotStored,
} as const;
