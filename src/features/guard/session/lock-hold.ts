import type { Route } from "../../../config/index.js";
import { Problem } from "../../../problem.js";
import { PROBLEMS } from "../../../problem-types.js";
import { pollWhile } from "../../../util/poll.js";
import { acquire, release, renew, sessionRef, type Acquired, type SessionRef } from "./lock.js";
import { logError, settleQuietly } from "../../../util/log.js";
import { keepRenewing, type Renewal } from "../../../util/renewal.js";
import { countSessionRefusal } from "../../../metrics/sessions.js";
import { renewingOf, type GuardPlace, type GuardTerms } from "../place.js";

export type SessionSettings = NonNullable<Route["session"]>;

/**
 * A session lock held by a call: given back (`release`) once its outcome is known, or left to run
 * out its lease (`letLapse`) when the origin may still be acting on it.
 */
export interface SessionLock {
  /** The grant's fencing token and the session: what the origin is told. */
  headers: Record<string, string>;
  /** The call's outcome is known (or it never went out): the lock is given back. */
  release: () => Promise<void>;
  /**
   * The call's outcome is unknown (the origin may still be acting on it): the lock is not given
   * back but no longer renewed, so it runs out its lease and only then can the session's next
   * call take it (with a higher fencing token).
   */
  letLapse: () => void;
  ticket: SessionTicket;
}

/** What a held lock travelling with a queued job needs to be released by the consumer. */
export interface SessionTicket {
  hash: string;
  owner: string;
  /** What the ledger names the lock by (absent in a job queued before it was carried). */
  ledgerId?: string;
}

/**
 * Whose session a call belongs to, as plain data: the session's identity (what the route's `key`
 * reads), the value the origin is told in `Sluice-Session`, whose it is, and the route's settings.
 */
export interface SessionSubject {
  identity: string;
  label: string;
  principal: string;
  settings: SessionSettings;
}

/**
 * Takes the call's session lock (routes keyed on the same session share it), waiting up to
 * `wait` for a busy one, polling with backoff. Held: the origin gets the grant's fencing token and
 * the session, the lock is renewed (`defer` keeps the renewals going) until `release` gives it
 * back (only if this call still holds it), so a call longer than `lease` is never overlapped by
 * the session's next one. A queued call (`terms.queued`) holds it for the job's life, unrenewed
 * until its consumer takes it up. Busy: a 409 problem is thrown, naming the session as busy.
 *
 * The lock is the principal's (`principal`, `auto` by default: the caller's credential): a session
 * id is no secret (it travels in headers, logs, URLs), and whoever knew another client's could
 * otherwise hold that client's session at 409 by keeping calls in flight under it.
 */
export async function holdSessionLock(
  route: string,
  subject: SessionSubject,
  place: GuardPlace,
  terms: GuardTerms,
): Promise<SessionLock> {
  const { settings } = subject;
  const ref = await lockOf(route, subject, place);
  const owner = crypto.randomUUID();
  // polls start at 20 ms and back off to 200 ms: a session's calls follow each other closely
  const lease = terms.queued ? terms.lifeMs : settings.lease;
  const a: Acquired = await pollWhile(
    await acquire(ref, owner, lease),
    (r) => r.kind === "busy",
    () => acquire(ref, owner, lease),
    { startMs: 20, maxMs: 200, budgetMs: settings.wait },
  );
  if (a.kind === "busy") {
    if (place.trail?.metrics) countSessionRefusal(place.trail.metrics, route);
    throw sessionBusy(a);
  }
  const renewal = terms.queued ? undefined : keepLocked(ref, owner, settings.lease, renewingOf(place));
  if (renewal) place.defer(renewal.done);
  return {
    headers: { "sluice-fencing-token": String(a.fence), "sluice-session": subject.label },
    release: async () => {
      renewal?.stop();
      await settleQuietly(release(ref, owner), "session_release_failed", { route: ref.route });
    },
    letLapse: () => renewal?.stop(),
    ticket: { hash: ref.hash, owner, ledgerId: ref.ledgerId },
  };
}

/** The lock of the subject's principal and session identity, where `place` keeps locks. */
async function lockOf(route: string, subject: SessionSubject, place: GuardPlace): Promise<SessionRef> {
  const { claimStore, prefix, trail } = place;
  const ref = await sessionRef(claimStore, prefix, route, subject.principal, subject.identity, trail?.idKey);
  return { ...ref, ledgerLength: trail?.ledgerLength };
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
export function keepLocked(
  ref: SessionRef,
  owner: string,
  leaseMs: number,
  renewing: typeof keepRenewing = keepRenewing,
): Renewal {
  return renewing(
    () => renew(ref, owner, leaseMs),
    leaseMs,
    (e) => logError("session_renew_error", e, { route: ref.route }),
  );
}
