import type { Route } from "../../config/index.js";
import type { RequestValue, Scope } from "../../context.js";
import { identify, ipIdentity, readPart, type RequestFacts } from "../../identity/identify.js";
import { principalOf } from "../../identity/principal.js";
import { idKeyOf } from "../../identity/pseudonym.js";
import { SETTLE_TIMEOUT_MS } from "../../region/index.js";
import { StoreError } from "../../store/deadline.js";
import { traceparentOf } from "../../util/traceparent.js";
import { guardFailure, type GuardSubject } from "./core.js";
import { readRequestKey, type Asker, type IdempotencySettings } from "./idempotency/request-key.js";
import type { GuardPlace } from "./place.js";
import type { SessionSettings, SessionSubject } from "./session/lock-hold.js";

/*
 * The gateway's request, read once for its guards (src/features/guard/core.ts): what is guarded as
 * plain data (the key and its fingerprint, the session, whose), and where (the home region's
 * Redis, the ledger's context). The core never sees the request's scope.
 */

/** Where a request's guards are read: the request's value (read, never written), its guarded route and its trace. */
export interface GuardedAt {
  value: RequestValue;
  route: Route;
  trace: string;
}

/** A request read for its guards: what is guarded, where, and the request to send on (its body read when a key was fingerprinted). */
export interface GuardedRequest {
  subject: GuardSubject;
  place: GuardPlace;
  request: Request;
}

/**
 * Reads `request` once for the route's guards, where the route has them for its method: its
 * idempotency key (the header's, or derived) with its fingerprint and principal, and its session's
 * identity and principal. Throws the problem a malformed or missing key is, or the 503 of a guard
 * store that cannot be reached.
 */
export async function readGuardedRequest(request: Request, at: GuardedAt): Promise<GuardedRequest> {
  const { value, route } = at;
  try {
    const { facts, method } = value;
    const place = guardPlaceOf(value, route, at.trace);
    const idem = route.idempotency?.methods.includes(method) ? route.idempotency : undefined;
    const of = { route: route.name, method: request.method, path: value.forwardPath, query: facts.url.search };
    const read = idem && (await readRequestKey(request, idem, { ...of, who: askerOf(facts, idem) }));
    const origin = value.config.originUrl;
    const key = read && idem && { key: read.key, fingerprint: read.fingerprint, ...read.asker, settings: idem, origin };
    const lockable = route.session?.methods.includes(method) ? route.session : undefined;
    const session = lockable && (await sessionSubjectOf(lockable, facts));
    return { subject: { route: route.name, key, session }, place, request: read?.request ?? request };
  } catch (e) {
    throw guardFailure(e);
  }
}

/** Who asks for a key, worked out once, and only for a request with a key to claim. */
export function askerOf(facts: RequestFacts, settings: IdempotencySettings): () => Promise<Asker> {
  let asker: Promise<Asker> | undefined;
  const who = async (): Promise<Asker> => ({
    principal: await principalOf(settings.principal, facts, settings.principalOf),
    // replays are bounded per address too: a principal can be invented per request (issue 29, finding 9)
    client: ipIdentity(facts.ip),
  });
  return () => (asker ??= who());
}

/** The request's session and whose it is; none when the request names no session. */
async function sessionSubjectOf(settings: SessionSettings, facts: RequestFacts): Promise<SessionSubject | undefined> {
  const named = identify([settings.key], facts, "skip");
  if (named.kind !== "id") return undefined;
  const principal = await principalOf(settings.principal, facts, settings.principalOf);
  return { identity: named.id, label: readPart(settings.key, facts) ?? "", principal, settings };
}

/**
 * The request's trace (its valid `traceparent`, else a new one), made once a guard needs it and
 * kept on the scope for the request's log line.
 */
export function traceOf(scope: Pick<Scope, "facts" | "trace">): string {
  return (scope.trace ??= traceparentOf(scope.facts.headers).traceparent);
}

/**
 * Where the request's guards live: the home region's Redis (a `StoreError` when none is
 * configured), with the decision budget for claims and locks and a fixed one for outcomes, and
 * the request's trace, session (on `route`), metrics and ledger length.
 */
export function guardPlaceOf(value: RequestValue, route: Route | undefined, trace: string): GuardPlace {
  const { stores, config, env, runtime, facts, defer } = value;
  const claimStore = stores.home();
  // writing outcomes stores up to a MiB: it gets a fixed budget (the side effect happened, so its outcome is worth waiting for)
  const outcomeStore = stores.fixed(SETTLE_TIMEOUT_MS);
  if (!claimStore || !outcomeStore)
    throw new StoreError(
      "unreachable",
      "no Upstash URL/token for the home region, where idempotency records and session locks live",
    );
  const sessionKey = route?.session?.key;
  const trail = {
    trace,
    session: sessionKey === undefined ? undefined : readPart(sessionKey, facts),
    metrics: runtime.metrics,
    ledgerLength: config.ledger_length,
    idKey: idKeyOf(env),
  };
  return { prefix: config.key_prefix, claimStore, outcomeStore, trail, defer };
}
