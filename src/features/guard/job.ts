import type { Config, Route } from "../../config/index.js";
import { outcomeUnknown, type OriginReply } from "../../origin/forward.js";
import { noteKeyOutcome, settleKeyClaim } from "./idempotency/key-claim.js";
import { refFromTicket, type ClaimTicket, type RecordRef } from "./idempotency/record-ref.js";
import { park, releaseUnsent, startDelivery } from "./idempotency/records.js";
import { keepClaimed } from "./idempotency/renewal.js";
import { callLifeMs, renewingOf, type GuardPlace } from "./place.js";
import type { RecordTrail } from "./idempotency/trail.js";
import { keepLocked, type SessionTicket } from "./session/lock-hold.js";
import { mark, release, releaseUnsent as releaseLockUnsent, type SessionRef } from "./session/lock.js";
import { SETTLE_TIMEOUT_MS, type Stores } from "../../region/index.js";
import type { Store } from "../../store/redis.js";
import type { Defer } from "../../util/defer.js";
import { logError } from "../../util/log.js";
import type { Renewal } from "../../util/renewal.js";
import { newTraceparent } from "../../util/traceparent.js";

/** What a queued job carries of its guards (src/features/shedding/queue/queue.ts `JobGuards`). */
export interface JobGuards {
  id: string;
  route: string;
  claim?: ClaimTicket;
  session?: SessionTicket;
  sluiceHeaders?: Record<string, string>;
}

// A queued job's guards (its idempotency claim and session lock), taken when it was queued and
// held unrenewed for the job's life: taken up by the consumer before it delivers (checked to be
// still the job's, marked as sent, then renewed as a live call's), settled once the origin's
// outcome is known, parked while the job waits for a retry (the mark cleared), given back only
// while no delivery of the job may have begun.

/** The leases of a guard the consumer holds while it delivers, when the route no longer names it. */
const DEFAULT_LEASE_MS = 30_000;

/**
 * How long a queued request holds its idempotency claim and session lock unrenewed: the job's
 * life, `max_age` (past it the job is dropped unsent), else `status_ttl`. The consumer takes them
 * up when it delivers (renewed then as a live call's), and settles them sooner. A claim whose job
 * outlives it (lost by the queue) may be taken over, as its delivery never started; a consumer
 * that finds it so does not deliver (`takeUpJobGuards`).
 */
export function jobGuardLease(route: Route): number {
  return route.queue.max_age ?? route.queue.status_ttl;
}

/** What the consumer works with. */
export interface JobGuardPlace {
  config: Pick<Config, "key_prefix" | "ledger_length">;
  stores: Pick<Stores, "fixed">;
  defer: Defer;
  /** How the guards are kept alive while the job is delivered (src/util/renewal.ts; a test drives its own). */
  renewing?: GuardPlace["renewing"];
}

/** A job's guards, taken up for its delivery. */
export interface TakenUp {
  /** Why the job must not be delivered: its claim or lock is no longer its own (`lost`), or a copy of the job started delivering it before (`sent`). */
  refused?: "lost" | "sent";
  /** Stops renewing them, once the renewals under way have landed. */
  stop(): Promise<void>;
}

/** The record of the job's idempotency claim, in the settle store (none: the job holds no claim). */
export function claimRef(m: JobGuards, place: JobGuardPlace): RecordRef | undefined {
  const { config, stores } = place;
  const store = stores.fixed(SETTLE_TIMEOUT_MS) as Store;
  return m.claim && refFromTicket(store, config.key_prefix, m.route, m.claim, jobTrail(m, config));
}

function lockRef(m: JobGuards, place: JobGuardPlace): SessionRef | undefined {
  const { config, stores } = place;
  const store = stores.fixed(SETTLE_TIMEOUT_MS) as Store;
  return (
    m.session && {
      store,
      prefix: config.key_prefix,
      route: m.route,
      hash: m.session.hash,
      // a job queued before the lock's id travelled with it: its ledger entries name no lock, never by the plain hash
      ledgerId: m.session.ledgerId ?? "",
      ledgerLength: config.ledger_length,
    }
  );
}

/**
 * Before the job goes to the origin: its session lock must still be its own (renewed to the
 * route's lease, and marked: the job may reach the origin from now on), then its claim (`start`:
 * still the job's, and never started by a copy of the job, which may have reached the origin; its
 * record kept for the delivery's life). Refused, nothing is delivered, and what is still the job's
 * and certainly unsent is given back. Taken up, both are renewed while the job runs.
 */
export async function takeUpJobGuards(m: JobGuards, route: Route, place: JobGuardPlace): Promise<TakenUp> {
  const claim = claimRef(m, place);
  const lock = lockRef(m, place);
  const claimLease = route.idempotency?.lease ?? DEFAULT_LEASE_MS;
  const lockLease = route.session?.lease ?? DEFAULT_LEASE_MS;
  const none: TakenUp = { stop: async () => undefined };
  if (lock && m.session && !(await mark(lock, m.session.owner, "start", lockLease))) {
    await giveBackJobGuards(m, place, { claim: true, lock: false });
    return { ...none, refused: "lost" };
  }
  const started = claim && m.claim ? await startDelivery(claim, m.claim.owner, claimLease, callLifeMs(route)) : "ok";
  if (started !== "ok") {
    // a copy that started it may still run, or have reached the origin: the lock (marked now) stays until its lease runs out
    if (started === "not_owner") await giveBackJobGuards(m, place, { claim: false, lock: true });
    return { ...none, refused: started === "sent" ? "sent" : "lost" };
  }
  const renewals: Renewal[] = [];
  if (claim && m.claim) renewals.push(keepClaimed(claim, m.claim.owner, claimLease, renewingOf(place)));
  if (lock && m.session) renewals.push(keepLocked(lock, m.session.owner, lockLease, renewingOf(place)));
  for (const r of renewals) place.defer(r.done);
  return {
    stop: async () => {
      for (const r of renewals) r.stop();
      await Promise.all(renewals.map((r) => r.done));
    },
  };
}

/**
 * The job is done with (delivered, or failed for good): its idempotency claim is settled with
 * what the origin did, exactly as on the live path (the answer stored for replays, tried again
 * while the store fails, or the key released or held), and its session lock is given back once the
 * outcome is known. An unknown outcome (a connection broken after the job was sent, no answer even
 * late, an interim 1xx) keeps the lock: the origin may still be acting on it, so it is left to run
 * out its lease (the caller stops renewing it), never handed to the session's next call at once.
 */
export async function settleJobGuards(
  m: JobGuards,
  route: Route,
  place: JobGuardPlace,
  reply: OriginReply,
): Promise<void> {
  const pending: Array<Promise<void>> = [];
  const ref = claimRef(m, place);
  if (ref && m.claim && route.idempotency) {
    const holder = { ref, owner: m.claim.owner, settings: route.idempotency };
    const settlement = await settleKeyClaim(holder, reply);
    pending.push(settlement.response.arrayBuffer().then(() => undefined));
    pending.push(settlement.outcome.then((o) => noteKeyOutcome(ref, o)));
  } else {
    pending.push(reply.response.body?.cancel() ?? Promise.resolve());
  }
  await Promise.all(pending);
  // a claim the route no longer settles stays held: its job was sent
  if (!route.idempotency) await giveBackJobGuards(m, place, { claim: true, lock: false });
  if (!outcomeUnknown(reply)) await releaseJobLock(m, place);
}

/**
 * The job goes back to the queue for a retry after a failure that did not act (a 5xx): its claim
 * is parked (held for the job's life again, and startable by the next copy) and its lock held as
 * long. False: the claim is no longer the job's, so it must not be retried.
 */
export async function parkJobGuards(m: JobGuards, route: Route, place: JobGuardPlace): Promise<boolean> {
  const claim = claimRef(m, place);
  const lock = lockRef(m, place);
  const lease = jobGuardLease(route);
  if (claim && m.claim && !(await park(claim, m.claim.owner, lease))) return false;
  if (lock && m.session) await mark(lock, m.session.owner, "park", lease);
  return true;
}

/**
 * Gives back what the job holds and never used, and only that: a copy of the job past `max_age`,
 * for a route that is gone, or whose lock or claim was lost, may follow a copy whose delivery began
 * (and may have reached the origin: the consumer died, or its status write failed). Its claim is
 * released only if no delivery of it started (`release_unsent`: a claim marked `sent` stays held,
 * and becomes indeterminate when its lease runs out), and its lock only if no delivery of it began
 * either (the lock's own mark, and the claim's when it has one): one whose job may still be at the
 * origin runs out its lease instead.
 */
export async function giveBackJobGuards(
  m: JobGuards,
  place: JobGuardPlace,
  what: { claim: boolean; lock: boolean } = { claim: true, lock: true },
): Promise<void> {
  const claim = claimRef(m, place);
  const lock = lockRef(m, place);
  let sent = false;
  if (what.claim && claim && m.claim) {
    const owner = m.claim.owner;
    sent = (await orSent(releaseUnsent(claim, owner), "job_claim_release_failed", m.id)) === "sent";
  }
  if (what.lock && lock && m.session && !sent) {
    const owner = m.session.owner;
    await orSent(releaseLockUnsent(lock, owner), "job_session_release_failed", m.id);
  }
}

/** A guard's release_unsent; one that fails is logged and taken as `sent` (nothing more is given back). */
function orSent<T extends string>(release: Promise<T>, event: string, job: string): Promise<T | "sent"> {
  return release.catch((e: unknown): "sent" => {
    logError(event, e, { job });
    return "sent";
  });
}

/** Releases a job's session lock outright: its delivery's outcome is known (settled) and nothing of the job runs anymore. */
export async function releaseJobLock(m: JobGuards, place: JobGuardPlace): Promise<void> {
  const lock = lockRef(m, place);
  if (lock && m.session)
    await release(lock, m.session.owner).catch((e: unknown) =>
      logError("job_session_release_failed", e, { job: m.id }),
    );
}

/** The ledger's context of a job's claim: the trace it was queued with (forwarded to the origin too), the ledger's length. */
function jobTrail(m: JobGuards, config: JobGuardPlace["config"]): RecordTrail {
  return { trace: m.sluiceHeaders?.traceparent ?? newTraceparent(), ledgerLength: config.ledger_length };
}
