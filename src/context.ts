import type { Context, ContextVariableMap, Next } from "hono";
import type { Config, Route } from "./config/index.js";
import type { Env } from "./env.js";
import type { RequestFacts } from "./identity/identify.js";
import type { Defer } from "./util/defer.js";
import type { ClientLabel } from "./metrics/labels.js";
import type { ForwardTarget, OriginReply } from "./origin/forward.js";
import type { DecisionHeader } from "./problem.js";
import type { Stores } from "./region/index.js";
import type { Runtime } from "./runtime.js";

/** One limit's state after the decision, as a handler sees it in `c.get("sluice")`. */
export interface LimitState {
  name: string;
  allowed: boolean;
  /** Whole tokens left. */
  remaining: number;
  /**
   * Seconds (whole, rounded up) until the bucket is full again, as the `RateLimit` header's `t`.
   * Kept for that header's sake; `resetMs` and `resetAt` say their unit in their name, and mean the
   * same in `limiter().limit()`'s answer.
   */
  reset: number;
  /** Milliseconds from now until the bucket is full again. */
  resetMs: number;
  /** When the bucket is full again, as epoch milliseconds (comparable with `Date.now()`). */
  resetAt: number;
  /** When refused: ms until the request could pass (-1: never). */
  retryAfterMs: number;
}

/** What sluice decided about the request, for the handler (`c.get("sluice")`). */
export interface SluiceDecision {
  /** What `Sluice-Decision` says (so far: later steps may still answer with a replay). */
  verdict: DecisionHeader;
  region: string;
  /** The route (or the middleware's `name`) the request was decided under. */
  route?: string;
  limits: LimitState[];
  /** The grant's fencing token, when an idempotency key or session lock was taken. */
  fencingToken?: string;
  idempotencyKey?: string;
}

/** The variables sluice puts on Hono's context. */
export interface SluiceVariables {
  sluice: SluiceDecision;
}

/*
 * Typed on every Hono context, as hono's own middleware type theirs (`jwtPayload`, hono/jwt): a
 * plain `new Hono()` reads `c.get("sluice")` as a `SluiceDecision`, no `SluiceEnv` needed. Each
 * capability declares its own result beside its adapter the same way (`sluiceLimits`,
 * `sluiceGuards`, `sluiceSwitch`: the `vars.ts` in its folder).
 */
declare module "hono" {
  interface ContextVariableMap {
    sluice: SluiceDecision;
  }
}

/** What a decision is counted and logged under. */
export interface DecisionMeta {
  route: string;
  /** The limit that decided (refused, or would have in shadow mode), or "-". */
  limit: string;
  /** The hashed identifier of the refused bucket. */
  blockedId?: string;
  /** What the dashboard shows of the refused client (none under `labels = "off"`). */
  label?: ClientLabel;
  rttMs?: number;
}

/**
 * What every request has, fixed once its scope is made (src/pipeline/scope.ts `newScope`): its
 * isolate, configuration, region, stores, facts and where it goes. Every field is `readonly`, so
 * that no step can rewrite the request it was handed; what the steps decide is `Scope`'s.
 */
export interface RequestValue {
  readonly runtime: Runtime;
  readonly config: Config;
  readonly region: string;
  readonly stores: Stores;
  readonly facts: RequestFacts;
  readonly defer: Defer;
  /** The Worker's bindings: secrets (the JWT's HMAC key) and the queue producer. */
  readonly env: Env;
  /** The method the guards decide on: the request's, or the override its route honours (`method_override`). */
  readonly method: string;
  /** The route honours the request's method-override header: it is forwarded (otherwise stripped). */
  readonly methodOverridden: boolean;
  /** The path the origin is asked for (the forward form of the normalised path). */
  readonly forwardPath: string;
  /** Where allowed requests go (the gateway); none: to the app's own handler. */
  readonly target?: ForwardTarget;
}

/**
 * What the steps of one request share: the request's value (made by the gateway's first
 * middleware, or by a standalone middleware for itself), and what the steps decide as the request
 * goes. Steps take the narrow parts they need from it and hand them to functions that know
 * nothing of Hono. What a capability decides for the others to read (the rate limiter's limits,
 * the guards held, the degrade switch) is not here: each is that capability's typed result on
 * Hono's context, published with {@link publish} and read back with {@link ownResult}.
 */
export interface Scope extends RequestValue {
  /**
   * The matched route, as the steps after see it (none: the request is forwarded without limits).
   * Not the request's fixed value: an MCP endpoint's step takes its limits and guards for its calls,
   * the job-status endpoint answers under none.
   */
  route?: Route;
  /** Set once the decision is to be counted: a matched route, or a deny-list refusal. */
  meta?: DecisionMeta;
  /** What `Sluice-Decision` says, as the steps have it so far. */
  decision: DecisionHeader;
  allowListed: boolean;
  /** The request's W3C `traceparent` (given, or made up), once a step needed it (idempotency). */
  trace?: string;
  /** The origin's reply (the gateway's forwarding) and how long it took: the main origin's, even when failover followed. */
  reply?: OriginReply & { latencyMs: number };
  /** The route's open breaker sends this request to its `divert_url` instead of the origin (failover). */
  failover?: "breaker";
  /** The divert origin's reply, when failover sent the request there: what the client got, and what a claim settles with. */
  diverted?: OriginReply & { latencyMs: number };
}

/**
 * What sluice's own middleware did to a request, on Hono's context so that every sluice middleware
 * of an app sees it (each has a scope of its own). Never read from a response's headers, which an
 * origin or a handler sets as it likes: an origin answering `Sluice-Decision: replay` must not be
 * refunded, nor stop sluice from stamping its own decision.
 */
export interface SluiceMarks {
  /** An idempotency step answered with the stored answer (a replay): the limits give back their charge. */
  sluiceReplayed?: boolean;
  /** A sluice mount stamped `Sluice-Decision` and `Sluice-Region`: a mount further out counts its decision only. */
  sluiceStamped?: boolean;
  /**
   * The routes whose decision on this request a sluice mount has counted and logged: a mount
   * further out under the same name (`accessLists({ name: "api" })` before `rateLimit({ name:
   * "api" })`) counts nothing more, so one request is one decision of its route.
   */
  sluiceCounted?: readonly string[];
}

/** Hono's environment for apps that use sluice: the variables it sets. */
export interface SluiceEnv {
  Variables: SluiceVariables & SluiceMarks & { sluiceScope: Scope };
}

/**
 * One step of the request path, Hono-shaped but with its scope handed in: the same step serves
 * the gateway (scope made by the gateway's first middleware) and a standalone middleware in an
 * app of the user's own (scope made by the middleware itself).
 */
export type Step = (c: Context<SluiceEnv>, scope: Scope, next: Next) => Promise<Response | void>;

/** A capability's result on Hono's context: a key of `ContextVariableMap` whose value is an object. */
export type ResultKey = {
  [K in keyof ContextVariableMap]: NonNullable<ContextVariableMap[K]> extends object ? K : never;
}[keyof ContextVariableMap];

/**
 * Which scope (mount) decided each published result, and the result it covered on the context
 * (published earlier on the same request, by a mount further out). Keyed by the results
 * themselves: a request's results go when its context does.
 */
const decidedIn = new WeakMap<object, { scope: RequestValue; earlier: unknown }>();

/**
 * A capability's result, published on Hono's context as hono's middleware publish theirs
 * (`c.set`): the handler and the mounts nearer it read the last one set. It is tagged with the
 * scope that decided it, so that this mount's own steps find it again with {@link ownResult} even
 * when a mount nearer the handler has set its own since. What is set is a copy of `result`, the
 * request's own: a value the isolate shares between requests (a cached switch) is never tagged.
 */
export function publish<K extends ResultKey>(
  c: Context,
  scope: RequestValue,
  key: K,
  result: NonNullable<ContextVariableMap[K]> & object,
): void {
  const own = { ...result };
  decidedIn.set(own, { scope, earlier: c.get(key) });
  c.set(key, own);
}

/**
 * The result `key` as `scope`'s own mount decided it, or none: never a value another mount set on
 * the same request (sluice mounts nest in an app, `rateLimit()` then `idempotency()`, and each
 * counts, forwards and diverts by its own decision). Walks back from the last one set through
 * those each covered.
 */
export function ownResult<K extends ResultKey>(
  c: Context,
  scope: RequestValue,
  key: K,
): ContextVariableMap[K] | undefined {
  let result: unknown = c.get(key);
  while (typeof result === "object" && result !== null) {
    const tag = decidedIn.get(result);
    if (!tag) return undefined;
    if (tag.scope === scope) return result as ContextVariableMap[K];
    result = tag.earlier;
  }
  return undefined;
}

/**
 * Whether the request's limits are waived: its client is allow-listed, or the operator's degrade
 * switch let it on (`open`, `divert`: the switch's result, `sluiceSwitch`, of this mount). The rate
 * limiter's step and the MCP adapter's calls ask this one rule, not each its own copy.
 */
export function limitsWaived(c: Context, scope: Scope): boolean {
  return scope.allowListed || ownResult(c, scope, "sluiceSwitch") !== undefined;
}

/**
 * The handler's view of a scope (`c.get("sluice")`), published once by the mount when the scope is
 * made: each field reads what the steps have decided when it is read, so no step publishes again.
 * Its fields are enumerable getters: `JSON.stringify` and a spread read them as they stand. Its
 * `limits` are the nearest the request has (the last `sluiceLimits` set: this mount's, or a mount's
 * further out when this one decided none, as an `idempotency()` nearer the handler than a
 * `rateLimit()`), and so are the guards' (the fencing token of the claim or lock the request holds,
 * whichever mount took it).
 */
export function decisionView(c: Context, scope: Scope): SluiceDecision {
  return {
    get verdict() {
      return scope.decision;
    },
    region: scope.region,
    get route() {
      return scope.route?.name;
    },
    get limits() {
      return limitStates(c.get("sluiceLimits"));
    },
    get fencingToken() {
      return c.get("sluiceGuards")?.sluiceHeaders["sluice-fencing-token"];
    },
    get idempotencyKey() {
      return c.get("sluiceGuards")?.sluiceHeaders["idempotency-key"];
    },
  };
}

/** The rate limiter's decision as the handler sees it: each limit's state, its reset as of the decision. */
function limitStates(limits: ContextVariableMap["sluiceLimits"] | undefined): LimitState[] {
  if (!limits) return [];
  return limits.outcomes.map((o) => ({
    name: o.limit.name,
    allowed: o.allowed,
    remaining: o.remaining,
    reset: Math.ceil(Math.max(0, o.resetMs) / 1000),
    resetMs: o.resetMs,
    resetAt: limits.decidedAt + Math.max(0, o.resetMs),
    retryAfterMs: o.retryAfterMs,
  }));
}
