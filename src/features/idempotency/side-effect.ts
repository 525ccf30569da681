import type { Route } from "../../config/index.js";
import type { Scope } from "../../context.js";
import {
  guard,
  SETTLE_LIFE_MS,
  type Asker,
  type ClaimStores,
  type ClaimSubject,
  type Guarded,
  type IdempotencySettings,
} from "./guard.js";
import { LATE_ANSWER_MS } from "../../origin/forward.js";
import type { ClaimTicket } from "./records.js";
import { principalOf } from "../../identity/principal.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { SETTLE_TIMEOUT_MS } from "../../region/index.js";
import {
  holdSession,
  sluiceHeadersOf,
  type SessionHold,
  type SessionPlace,
  type SessionTicket,
} from "../session/guard.js";
import { isMisconfigured, StoreError } from "../../store/deadline.js";
import type { RecordTrail } from "./trail.js";
import { ipIdentity, readPart } from "../../identity/identify.js";
import { idKeyOf } from "../../identity/pseudonym.js";
import { traceparentOf } from "../../util/traceparent.js";

/**
 * What makes two requests the same request, for a route's idempotency keys. Who asks is worked out
 * once, and only for a request with a key to claim.
 */
export function claimSubject(scope: Scope, route: Route, settings: IdempotencySettings): ClaimSubject {
  let asker: Promise<Asker> | undefined;
  const who = async (): Promise<Asker> => ({
    principal: await principalOf(settings.principal, scope.facts, settings.principalOf),
    // replays are bounded per address too: a principal can be invented per request (issue 29, finding 9)
    client: ipIdentity(scope.facts.ip),
  });
  return {
    route: route.name,
    path: scope.forwardPath,
    query: scope.facts.url.search,
    who: () => (asker ??= who()),
    origin: scope.config.originUrl,
  };
}

/**
 * The longest a live call may hold its claim: its session's wait for the lock, `origin_timeout`
 * (twice on a route that fails over: the divert origin gets its own), the wait for a late answer
 * past it and the storing of its outcome. Its record is kept at least that long plus `ttl`
 * (lua/idempotency.lua, `life_until`), so a holder that loses Redis while its call runs never
 * leaves its key free while the origin may still be acting on it.
 */
export function callLifeMs(route: Route): number {
  const calls = route.divertUrl === undefined ? 1 : 2;
  return (route.session?.wait ?? 0) + calls * route.origin_timeout + LATE_ANSWER_MS + SETTLE_LIFE_MS;
}

/** The home region's Redis, where claims and session locks live (a `StoreError` when none is configured). */
export function claimStores(scope: Scope): ClaimStores {
  const claim = scope.stores.home();
  // settling stores up to a MiB: it gets a fixed budget (the side effect happened, so its outcome is worth waiting for)
  const settle = scope.stores.fixed(SETTLE_TIMEOUT_MS);
  if (!claim || !settle)
    throw new StoreError(
      "unreachable",
      "no Upstash URL/token for the home region, where idempotency records and session locks live",
    );
  return { prefix: scope.config.key_prefix, claim, settle, trail: claimTrail(scope) };
}

/** The request's trace (its valid `traceparent`, else a new one), session, metrics and ledger length, for its claim. */
function claimTrail(scope: Scope): RecordTrail {
  scope.trace ??= traceparentOf(scope.facts.headers).traceparent;
  const sessionKey = scope.route?.session?.key;
  return {
    trace: scope.trace,
    session: sessionKey === undefined ? undefined : readPart(sessionKey, scope.facts),
    metrics: scope.runtime.metrics,
    ledgerLength: scope.config.ledger_length,
    idKey: idKeyOf(scope.env),
  };
}

export function sessionPlace(scope: Scope, route: Route): SessionPlace {
  const { prefix, claim } = claimStores(scope);
  return {
    store: claim,
    prefix,
    route: route.name,
    ledgerLength: scope.config.ledger_length,
    metrics: scope.runtime.metrics,
    idKey: idKeyOf(scope.env),
  };
}

/**
 * Runs a guard's work (a claim, a lock): either guard store failing is a 503, whatever
 * `on_store_error` says for limits: a side effect is never sent unguarded.
 */
export async function coordinated<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (e) {
    throw guardFailure(e);
  }
}

/**
 * What a guard's store failing is answered with: an outage is the 503; a misconfigured store (a
 * token refused, a URL that is not REST) stays the `StoreError` it is, answered as the
 * configuration error it is where the request is answered.
 */
function guardFailure(e: unknown): unknown {
  return e instanceof StoreError && !isMisconfigured(e) ? coordinationUnavailable(e) : e;
}

function coordinationUnavailable(e: StoreError): Problem {
  return new Problem({
    type: PROBLEMS.coordinationStoreUnavailable,
    detail: `idempotency records or session locks could not be reached (${e.reason})`,
    headers: { "Retry-After": "1" },
  });
}

/** A queued side effect's guards, taken before it is queued; they travel with the job. */
export interface ClaimedEffect {
  /** The request to send (its body already read when the key had to be fingerprinted). */
  request: Request;
  sluiceHeaders: Record<string, string>;
  /** Sluice decided not to send it after all: the key and the session are free again. */
  abandon: () => Promise<void>;
  claim?: ClaimTicket;
  session?: SessionTicket;
}

/**
 * One side effect per key, then one call per session at a time, for a request that goes to the
 * queue instead of the origin: claims its idempotency key and takes its session lock, where the
 * route has them for this method, both held `leaseMs` (the job's life) until the consumer takes
 * them up. A replay is returned as such; a refusal (duplicate in flight, busy session, store down)
 * is thrown.
 */
export async function claimSideEffect(
  request: Request,
  scope: Scope,
  route: Route,
  leaseMs?: number,
): Promise<ClaimedEffect | { kind: "replay"; response: Response }> {
  let guarded: Guarded | undefined;
  let session: SessionHold = { kind: "none" };
  try {
    if (route.idempotency?.methods.includes(scope.method)) {
      guarded = await guard(
        request,
        route.idempotency,
        claimSubject(scope, route, route.idempotency),
        claimStores(scope),
        scope.defer,
        leaseMs === undefined ? { lifeMs: callLifeMs(route) } : { lifeMs: leaseMs, queued: true },
      );
      if (guarded.kind === "replay") return guarded;
    }
    if (route.session?.methods.includes(scope.method))
      session = await holdSession(route.session, scope.facts, sessionPlace(scope, route), scope.defer, leaseMs);
  } catch (e) {
    if (guarded?.kind === "forward") await guarded.abandon();
    throw guardFailure(e);
  }
  const claimed = guarded?.kind === "forward" ? guarded : undefined;
  const held = session.kind === "held" ? session : undefined;
  return {
    request: claimed?.request ?? request,
    sluiceHeaders: sluiceHeadersOf(claimed?.sluiceHeaders ?? {}, held?.headers),
    abandon: async () => {
      await Promise.all([claimed?.abandon(), held?.release()]);
    },
    claim: claimed?.ticket,
    session: held?.ticket,
  };
}
