/*
 * A queued job's guards (its idempotency claim and session lock), taken when it was queued and
 * held unrenewed for the job's life: taken up by the consumer before it delivers (`takeUpJob`:
 * checked to be still the job's, marked as sent, then renewed as a live call's), and held then as
 * one `JobClaim`, the consumer's counterpart of a live call's `Claim` (core.ts): settled once the
 * origin's outcome is known (`settleWith`), parked while the job waits for a retry (`park`: the
 * mark cleared), and let lapse if the consumer fails mid-delivery (`letLapse`). Each stops the
 * guards' renewals itself, so no caller can leave them running. A job never taken up (past
 * `max_age`, its route gone) gives its guards back with `giveBackUnsentJob`: only while no
 * delivery of the job may have begun. The guard core exports these (core.ts); the queue consumer
 * (src/features/shedding/queue/deliver.ts) calls nothing else of its guards.
 */
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

/** The leases of a guard the consumer holds while it delivers, when the route no longer names it. */
const DEFAULT_LEASE_MS = 30_000;

/**
 * How long a queued request holds its idempotency claim and session lock unrenewed: the job's
 * life, `max_age` (past it the job is dropped unsent), else `status_ttl`. The consumer takes them
 * up when it delivers (renewed then as a live call's), and settles them sooner. A claim whose job
 * outlives it (lost by the queue) may be taken over, as its delivery never started; a consumer
 * that finds it so does not deliver (`takeUpJob`).
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

/**
 * A job's guards, taken up for its delivery and renewed while it runs: one held object with the
 * lifecycle of a live call's `Claim`. Each way out stops the renewals itself and waits for those
 * under way to land: `settleWith` once its writes are done (the claim renewed meanwhile, as a live
 * call's while its outcome is written), `park` before its writes (a renewal landing after them
 * would undo the job's lease).
 */
export interface JobClaim {
  /**
   * The job is done with (delivered, or failed for good): its idempotency claim is settled with
   * what the origin did, exactly as on the live path (the answer stored for replays, tried again
   * while the store fails, or the key released or held), and its session lock is given back once
   * the outcome is known. An unknown outcome (a connection broken after the job was sent, no answer
   * even late, an interim 1xx) keeps the lock: the origin may still be acting on it, so it is left
   * to run out its lease (no longer renewed once this returns), never handed to the session's next
   * call at once. Callable after a `park` that answered false.
   */
  settleWith(reply: OriginReply): Promise<void>;
  /**
   * The job goes back to the queue for a retry after a failure that did not act (a 5xx): its claim
   * is parked (held for the job's life again, and startable by the next copy) and its lock held as
   * long. False: the claim is no longer the job's, so it must not be retried (`settleWith` it).
   */
  park(): Promise<boolean>;
  /**
   * The consumer gives the delivery up before its outcome is written (it failed: a store, a status
   * write): the renewals stop and nothing is given back, as nothing is certainly unsent once taken
   * up (the claim is marked sent, the lock marked: the job may have reached the origin), so both
   * run out their leases, the claim indeterminate then. Nothing more once settled or parked.
   */
  letLapse(): Promise<void>;
}

/**
 * A job's guards taken up (`held`), or why the job must not be delivered (`refused`): its claim
 * or lock is no longer its own (`lost`), or a copy of the job started delivering it before (`sent`).
 */
export type JobTakeUp = { kind: "refused"; why: "lost" | "sent" } | { kind: "held"; claim: JobClaim };

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
 * and certainly unsent is given back. Taken up, both are renewed while the job runs, until the
 * `JobClaim` is settled, parked or let lapse.
 */
export async function takeUpJob(m: JobGuards, route: Route, place: JobGuardPlace): Promise<JobTakeUp> {
  const claim = claimRef(m, place);
  const lock = lockRef(m, place);
  const claimLease = route.idempotency?.lease ?? DEFAULT_LEASE_MS;
  const lockLease = route.session?.lease ?? DEFAULT_LEASE_MS;
  if (lock && m.session && !(await mark(lock, m.session.owner, "start", lockLease))) {
    await giveBackUnsent(m, place, { claim: true, lock: false });
    return { kind: "refused", why: "lost" };
  }
  const started = claim && m.claim ? await startDelivery(claim, m.claim.owner, claimLease, callLifeMs(route)) : "ok";
  if (started !== "ok") {
    // a copy that started it may still run, or have reached the origin: the lock (marked now) stays until its lease runs out
    if (started === "not_owner") await giveBackUnsent(m, place, { claim: false, lock: true });
    return { kind: "refused", why: started === "sent" ? "sent" : "lost" };
  }
  const renewals: Renewal[] = [];
  if (claim && m.claim) renewals.push(keepClaimed(claim, m.claim.owner, claimLease, renewingOf(place)));
  if (lock && m.session) renewals.push(keepLocked(lock, m.session.owner, lockLease, renewingOf(place)));
  for (const r of renewals) place.defer(r.done);
  return { kind: "held", claim: heldJobClaim(m, route, place, renewals) };
}

/** The guards a taken-up job holds, as one claim whose every way out stops their renewals. */
function heldJobClaim(m: JobGuards, route: Route, place: JobGuardPlace, renewals: Renewal[]): JobClaim {
  const stopRenewals = async (): Promise<void> => {
    for (const r of renewals) r.stop();
    await Promise.all(renewals.map((r) => r.done));
  };
  return {
    settleWith: async (reply) => {
      try {
        await settleJobWith(m, route, place, reply);
      } finally {
        await stopRenewals();
      }
    },
    park: async () => {
      await stopRenewals();
      return parkJob(m, route, place);
    },
    letLapse: stopRenewals,
  };
}

/** `JobClaim.settleWith`'s writes: the claim settled as on the live path, the lock given back when the outcome is known. */
async function settleJobWith(m: JobGuards, route: Route, place: JobGuardPlace, reply: OriginReply): Promise<void> {
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
  if (!route.idempotency) await giveBackUnsent(m, place, { claim: true, lock: false });
  if (!outcomeUnknown(reply)) await releaseJobLock(m, place);
}

/** `JobClaim.park`'s writes: the claim parked for the job's life, then the lock (not when the claim is lost). */
async function parkJob(m: JobGuards, route: Route, place: JobGuardPlace): Promise<boolean> {
  const claim = claimRef(m, place);
  const lock = lockRef(m, place);
  const lease = jobGuardLease(route);
  if (claim && m.claim && !(await park(claim, m.claim.owner, lease))) return false;
  if (lock && m.session) await mark(lock, m.session.owner, "park", lease);
  return true;
}

/**
 * Gives back the guards of a job the consumer never took up (past `max_age`, its route gone):
 * only what it certainly never sent (`giveBackUnsent`). A taken-up job's guards go through its
 * `JobClaim` instead.
 */
export async function giveBackUnsentJob(m: JobGuards, place: JobGuardPlace): Promise<void> {
  await giveBackUnsent(m, place, { claim: true, lock: true });
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
async function giveBackUnsent(
  m: JobGuards,
  place: JobGuardPlace,
  what: { claim: boolean; lock: boolean },
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
async function releaseJobLock(m: JobGuards, place: JobGuardPlace): Promise<void> {
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
