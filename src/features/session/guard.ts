import type { Route } from "../../config/index.js";
import { identify, readPart, type RequestFacts } from "../../identity/identify.js";
import { principalOf } from "../../identity/principal.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import type { Store } from "../../store/redis.js";
import { pollWhile } from "../../util/poll.js";
import { acquire, release, renew, sessionRef, type Acquired, type SessionRef } from "./lock.js";
import { logError, settleQuietly } from "../../util/log.js";
import type { Defer } from "../../util/defer.js";
import { keepRenewing, type Renewal } from "../../util/renewal.js";
import { countSessionRefusal } from "../../metrics/sessions.js";
import type { FieldCounter } from "../../metrics/idempotency.js";
import type { IdKey } from "../../identity/pseudonym.js";

export type SessionSettings = NonNullable<Route["session"]>;

export type SessionHold =
  | { kind: "none" }
  | {
      kind: "held";
      headers: Record<string, string>;
      /** The call's outcome is known (or it never went out): the lock is given back. */
      release: () => Promise<void>;
      /**
       * The call's outcome is unknown (the origin may still be acting on it): the lock is not
       * given back but no longer renewed, so it runs out its lease and only then can the
       * session's next call take it (with a higher fencing token).
       */
      letLapse: () => void;
      ticket: SessionTicket;
    };

/** What a held lock travelling with a queued job needs to be released by the consumer. */
export interface SessionTicket {
  hash: string;
  owner: string;
  /** What the ledger names the lock by (absent in a job queued before it was carried). */
  ledgerId?: string;
}

/** Where session locks live: the home region's Redis, under the deployment's prefix, per route. */
export interface SessionPlace {
  store: Store;
  prefix: string;
  route: string;
  /** The ledger's length (`ledger_length`). */
  ledgerLength?: number;
  /** Where a refusal is counted (`sluice_session_refusals_total`): refusals are counted, not ledgered. */
  metrics?: FieldCounter;
  /** The deployment's key of the ids the ledger shows. */
  idKey?: IdKey;
}

/**
 * Takes the request's session lock (routes keyed on the same session share it), waiting up to
 * `wait` for a busy one, polling with backoff. Held: the origin gets the grant's fencing token and
 * the session, the lock is renewed (`defer` keeps the renewals going) until `release` gives it
 * back (only if this request still holds it), so a call longer than `lease` is never overlapped by
 * the session's next one. A queued call passes `leaseMs` instead: held that long, for the job's
 * life, unrenewed until its consumer takes it up. Busy: a 409 problem is thrown, naming the
 * session as busy. No session identity: no lock.
 *
 * The lock is the principal's (`principal`, `auto` by default: the caller's credential): a session id is no secret (it
 * travels in headers, logs, URLs), and whoever knew another client's could otherwise hold that
 * client's session at 409 by keeping calls in flight under it.
 */
export async function holdSession(
  settings: SessionSettings,
  facts: RequestFacts,
  place: SessionPlace,
  defer: Defer,
  leaseMs?: number,
): Promise<SessionHold> {
  const who = identify([settings.key], facts, "skip");
  if (who.kind !== "id") return { kind: "none" };
  const ref = await lockOf(settings, facts, place, who.id);
  const owner = crypto.randomUUID();
  // polls start at 20 ms and back off to 200 ms: a session's calls follow each other closely
  const lease = leaseMs ?? settings.lease;
  const a: Acquired = await pollWhile(
    await acquire(ref, owner, lease),
    (r) => r.kind === "busy",
    () => acquire(ref, owner, lease),
    { startMs: 20, maxMs: 200, budgetMs: settings.wait },
  );
  if (a.kind === "busy") {
    if (place.metrics) countSessionRefusal(place.metrics, place.route);
    throw sessionBusy(a);
  }
  const renewal = leaseMs === undefined ? keepLocked(ref, owner, settings.lease) : undefined;
  if (renewal) defer(renewal.done);
  return {
    kind: "held",
    headers: { "sluice-fencing-token": String(a.fence), "sluice-session": readPart(settings.key, facts) ?? "" },
    release: async () => {
      renewal?.stop();
      await settleQuietly(release(ref, owner), "session_release_failed", { route: ref.route });
    },
    letLapse: () => renewal?.stop(),
    ticket: { hash: ref.hash, owner, ledgerId: ref.ledgerId },
  };
}

/** The lock of the request's principal and session `identity`, where `place` keeps locks. */
async function lockOf(
  settings: SessionSettings,
  facts: RequestFacts,
  place: SessionPlace,
  identity: string,
): Promise<SessionRef> {
  const principal = await principalOf(settings.principal, facts, settings.principalOf);
  const ref = await sessionRef(place.store, place.prefix, place.route, principal, identity, place.idKey);
  return { ...ref, ledgerLength: place.ledgerLength };
}

function sessionBusy(a: { leftMs: number; fence: number }): Problem {
  return new Problem({
    type: PROBLEMS.sessionBusy,
    detail: `another side-effecting call of this session is in flight (fencing token ${a.fence}); calls of one session run one at a time`,
    headers: { "Retry-After": String(Math.max(1, Math.ceil(Math.min(a.leftMs, 5_000) / 1000))) },
    extensions: { lease_left_ms: a.leftMs },
  });
}

/**
 * Keeps `owner`'s lock alive while its call runs (src/util/renewal.ts): only a holder that died
 * lets the lease run out, and the session's next call takes it over then.
 */
export function keepLocked(ref: SessionRef, owner: string, leaseMs: number): Renewal {
  return keepRenewing(
    () => renew(ref, owner, leaseMs),
    leaseMs,
    (e) => logError("session_renew_error", e, { route: ref.route }),
  );
}

/**
 * What sluice tells the origin: the fencing token of the grant that lets the call through (the
 * session's when the route has one, else the idempotency claim's), the session, the key.
 */
export function sluiceHeadersOf(
  idem: Record<string, string>,
  session: Record<string, string> | undefined,
): Record<string, string> {
  if (!session) return idem;
  const { "sluice-fencing-token": idemToken, ...rest } = idem;
  return { ...rest, ...(idemToken ? { "sluice-idempotency-fencing-token": idemToken } : {}), ...session };
}
