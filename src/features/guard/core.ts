/**
 * The guard core: one side effect per idempotency key, one call per session at a time. Plain data
 * in and out, callable without Hono or an HTTP request: the gateway's step (step.ts), the queue's
 * `enqueue` (side-effect.ts) and an MCP adapter all call `claim`, and settle the `Claim` they get
 * with what the origin did. The queue consumer takes a queued job's guards up (`takeUpJob`,
 * job-claim.ts) and settles the `JobClaim` it gets the same way, or parks it for a retry; a job
 * never taken up gives its guards back with `giveBackUnsentJob`.
 *
 * @example
 * const guarding = await claim({ route: "orders", key: { key, fingerprint, principal, settings } }, place, { lifeMs });
 * if (guarding.kind === "replay") return replayedResponse(guarding.answer);
 * const reply = await sendToOrigin(request, target);
 * return guarding.claim.settleWith({ reply });
 */
import { LATE_ANSWER_MS, outcomeUnknown, type OriginReply } from "../../origin/forward.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { isMisconfigured, StoreError } from "../../store/deadline.js";
import { discardBody } from "../../util/log.js";
import { claimKey, type KeyClaim, type KeySubject, type StoredAnswer } from "./idempotency/key-claim.js";
import type { ClaimTicket } from "./idempotency/record-ref.js";
import type { GuardPlace, GuardTerms } from "./place.js";
import { holdSessionLock, type SessionLock, type SessionSubject, type SessionTicket } from "./session/lock-hold.js";

export {
  giveBackUnsentJob,
  jobGuardLease,
  takeUpJob,
  type JobClaim,
  type JobGuardPlace,
  type JobGuards,
  type JobTakeUp,
} from "./job-claim.js";

/** What a call is, for its guards: its route, and the key it claims and the session it runs in (either may be absent). */
export interface GuardSubject {
  route: string;
  key?: KeySubject;
  session?: SessionSubject;
}

/** What the origin did with a guarded call: its reply, and before it the main origin's when the call failed over. */
export interface CallOutcome {
  reply: OriginReply & { latencyMs?: number };
  /** The main origin's reply when `reply` is the divert origin's (failover): the session waits for both. */
  failedOver?: OriginReply;
}

/** The call's guards, held until the call's outcome is known. */
export interface Claim {
  /** What the origin is told: the fencing token (the session's when there is one, else the key's), the key, the session, the trace. */
  sluiceHeaders: Record<string, string>;
  /** How long past `origin_timeout` the origin's answer is awaited, set when anything is held: the outcome must be learnt. */
  lateAnswerMs?: number;
  /** What a queued job carries of its guards, to be taken up by the consumer (`takeUpJob`). */
  tickets: { claim?: ClaimTicket; session?: SessionTicket };
  /**
   * The call's outcome: the key settled with it (its answer stored for replays, or the key
   * released or held), the session lock given back once the outcome is known, or left to run out
   * its lease when the origin may still be acting. Gives back the response for the client.
   */
  settleWith(outcome: CallOutcome): Promise<Response>;
  /** Sluice decided not to send the call after all (a busy session, a full queue, a refusal): both guards given back. */
  abandon(reason: string): Promise<void>;
}

/** A claimed call goes on (`held`); a duplicate of a completed one is answered with its key's stored answer (`replay`). */
export type Guarding = { kind: "held"; claim: Claim } | { kind: "replay"; answer: StoredAnswer };

/**
 * Claims the subject's key, then takes its session lock. A duplicate of a completed key gets the
 * stored answer; a refusal (a duplicate in flight or indeterminate, a key reused, a busy session)
 * is thrown as its problem, and a store that cannot be reached as the 503 "Coordination store
 * unavailable", never as an unguarded call. A lock refused after the key was claimed gives the key
 * back: nothing was sent.
 */
export async function claim(subject: GuardSubject, place: GuardPlace, terms: GuardTerms): Promise<Guarding> {
  let key: KeyClaim | undefined;
  try {
    if (subject.key) {
      const claimed = await claimKey(subject.route, subject.key, place, terms);
      if (claimed.kind === "replay") return claimed;
      key = claimed.claim;
    }
    const lock = subject.session && (await holdSessionLock(subject.route, subject.session, place, terms));
    return { kind: "held", claim: heldClaim(key, lock, place) };
  } catch (e) {
    await key?.abandon();
    throw guardFailure(e);
  }
}

/** The guards a call holds, as one claim. */
function heldClaim(key: KeyClaim | undefined, lock: SessionLock | undefined, place: GuardPlace): Claim {
  return {
    sluiceHeaders: sluiceHeadersOf(key?.sluiceHeaders ?? {}, lock?.headers),
    lateAnswerMs: key || lock ? LATE_ANSWER_MS : undefined,
    tickets: { claim: key?.ticket, session: lock?.ticket },
    settleWith: async (outcome) => {
      const response = key ? await key.settleWith(outcome.reply) : outcome.reply.response;
      if (lock) await settleLockWith(lock, outcome, !key, place);
      return response;
    },
    abandon: async () => {
      await Promise.all([key?.abandon(), lock?.release()]);
    },
  };
}

/**
 * Gives the session lock back once the call's outcome is known: every reply an answer or a request
 * never sent, a timed-out one's once its late answer came (then after the response, in `defer`).
 * An outcome that stays unknown (a connection broken after the request was sent, an interim 1xx
 * only, no late answer) may still be running at the origin: the lock is left to run out its
 * lease. `ownsLateBodies`: no key reads the late answers, so their bodies are dropped here.
 */
async function settleLockWith(
  lock: SessionLock,
  outcome: CallOutcome,
  ownsLateBodies: boolean,
  place: GuardPlace,
): Promise<void> {
  const known = outcomeKnown([outcome.failedOver, outcome.reply], ownsLateBodies);
  const settle = (k: boolean) => (k ? lock.release() : lock.letLapse());
  if (typeof known === "boolean") await settle(known);
  else place.defer(known.then(settle));
}

/**
 * Whether a call's outcome is known from its replies: each an answer, or a request never sent; a
 * timeout's once its late answer came (a promise, then). No reply at all: known.
 */
export function outcomeKnown(
  replies: ReadonlyArray<OriginReply | undefined>,
  ownsLateBodies: boolean,
): boolean | Promise<boolean> {
  const given = replies.filter((r) => r !== undefined);
  const pending = given.flatMap((r) => (r.late ? [r.late] : []));
  const now = given.every((r) => r.late !== undefined || !outcomeUnknown(r));
  if (pending.length === 0) return now;
  const late = pending.map((l) =>
    l.then(async (res) => (ownsLateBodies && (await discardBody(res?.body)), res !== undefined)),
  );
  return Promise.all(late).then((answered) => now && answered.every(Boolean));
}

/**
 * What sluice tells the origin: the fencing token of the grant that lets the call through (the
 * session's when the call has one, else the idempotency claim's), the session, the key.
 */
export function sluiceHeadersOf(
  idem: Record<string, string>,
  session: Record<string, string> | undefined,
): Record<string, string> {
  if (!session) return idem;
  const { "sluice-fencing-token": idemToken, ...rest } = idem;
  return { ...rest, ...(idemToken ? { "sluice-idempotency-fencing-token": idemToken } : {}), ...session };
}

/**
 * What a guard's store failing is answered with: an outage is the 503, whatever `on_store_error`
 * says for limits (a side effect is never sent unguarded); a misconfigured store (a token refused,
 * a URL that is not REST) stays the `StoreError` it is, answered as the configuration error it is.
 */
export function guardFailure(e: unknown): unknown {
  return e instanceof StoreError && !isMisconfigured(e) ? coordinationUnavailable(e) : e;
}

function coordinationUnavailable(e: StoreError): Problem {
  return new Problem({
    type: PROBLEMS.coordinationStoreUnavailable,
    detail: `idempotency records or session locks could not be reached (${e.reason})`,
    headers: { "Retry-After": "1" },
  });
}
