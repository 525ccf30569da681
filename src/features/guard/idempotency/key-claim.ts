import { originDidNotAct, withLateAnswer, type OriginReply } from "../../../origin/forward.js";
import { fromBase64, toBase64 } from "../../../util/base64.js";
import { readCapped } from "../../../util/body.js";
import { pollWhile, retried } from "../../../util/poll.js";
import { Problem } from "../../../problem.js";
import { PROBLEMS, type ProblemKind } from "../../../problem-types.js";
import { claimRecord, complete, jobOwner, noteClaim, releaseOrHold, releaseUnsent, type Claim } from "./records.js";
import { recordRef, type ClaimTicket, type RecordRef } from "./record-ref.js";
import { StoreError } from "../../../store/deadline.js";
import { keepClaimed } from "./renewal.js";
import { IdempotencyRefusal } from "./refusal.js";
import { noteIdempotency, noteOriginReply, traceHeader } from "./trail.js";
import { discardBody, log, logError, settleQuietly } from "../../../util/log.js";
import { OUTCOME_WRITE_RETRY, renewingOf, type Backoff, type GuardPlace, type GuardTerms } from "../place.js";
import type { IdempotencySettings } from "./request-key.js";
import { replayedHeaders } from "./replayed-headers.js";
import { reconcileDuplicate } from "./reconcile.js";

/*
 * The idempotency half of the guard core (src/features/guard/core.ts): one side effect per key.
 * A key is claimed (or a duplicate answered from the record), the claim renewed while its call
 * runs, and settled with what the origin did: its answer stored, or the key released or held.
 */

/**
 * What became of a key's claim, once its request is done with:
 * - `completed`: the answer is stored for replays; `late_answer`: so is one that came after the
 *   client's 504 (a timeout).
 * - `released`: the origin certainly did not act (never sent, or a 5xx under `release`); a retry runs.
 * - `indeterminate`: the origin may have acted and no answer can be replayed; duplicates get 409.
 * - `not_owner`: the claim was no longer this request's (taken over); `store_error`: the store failed.
 */
export type KeyOutcome = "completed" | "late_answer" | "released" | "indeterminate" | "not_owner" | "store_error";

/**
 * Reports what became of a held claim once its request is done with. `released` and
 * `indeterminate` are counted where the record changes (`releaseOrHold`), `completed` needs no
 * report; an answer stored after the client's 504 is `late_answer`, and a claim that stopped
 * being this request's, or a store that failed, is logged.
 */
export function noteKeyOutcome(ref: RecordRef, outcome: KeyOutcome): void {
  if (outcome === "late_answer") noteIdempotency(ref, "late_answer", "late_answer");
  else if (outcome === "not_owner" || outcome === "store_error")
    log("idempotency_outcome", { route: ref.route, outcome });
}

/**
 * What is claimed, as plain data: the key (the client's, or one derived from what the call is), the
 * fingerprint of the request it came with (the same key with another fingerprint is a 422), whose
 * key it is and from which address, and the route's settings. An HTTP request gives it through
 * `readRequestKey`; an MCP tool call from its principal, tool and canonical arguments.
 */
export interface KeySubject {
  key: string;
  fingerprint: string;
  principal: string;
  /** The client's address, spelled as the principal "ip" is: its replays are bounded whatever principals it claims. */
  client?: string;
  settings: IdempotencySettings;
  /**
   * The route's origin, where a `reconcile` path is asked (absent: an app without ORIGIN_URL; a
   * full reconcile URL needs none).
   */
  origin?: URL;
}

/** A completed key's stored answer, as plain data: what a duplicate is answered with. */
export interface StoredAnswer {
  status: number;
  headers: Array<[string, string]>;
  body: Uint8Array | null;
}

/** A stored answer as the HTTP response a duplicate gets (`Idempotent-Replayed: true`). */
export function replayedResponse(answer: StoredAnswer): Response {
  return new Response(answer.body, {
    status: answer.status,
    headers: [...answer.headers, ["idempotent-replayed", "true"]],
  });
}

/** A key's claim, held by this call until it is settled with what the origin did, or abandoned. */
export interface KeyClaim {
  /** The fencing token, the key, the trace: what the origin is told. */
  sluiceHeaders: Record<string, string>;
  /** What a queued job carries to settle the claim in the consumer. */
  ticket: ClaimTicket;
  /** Settles the claim with the origin's reply; gives back the response for the client (see `settleKeyClaim`). */
  settleWith(reply: OriginReply & { latencyMs?: number }): Promise<Response>;
  /** Sluice decided not to send the call after all (a busy session, a full queue): the key is free for the retry. */
  abandon(): Promise<void>;
}

/**
 * One side effect per key: claims `subject`'s key in `route` for this call, or answers why not.
 * Claimed: the call goes on holding the claim, renewed while it runs (a queued job's is held
 * unrenewed for the job's life until the consumer takes it up). A completed key: its stored
 * answer (`replay`). Throws a `Problem`: 409 while another call is in flight (after waiting up to
 * `wait` for its answer) or the outcome is indeterminate, 422 when the key comes with another
 * fingerprint, 429 past the replay bound.
 */
export async function claimKey(
  route: string,
  subject: KeySubject,
  place: GuardPlace,
  terms: GuardTerms,
): Promise<{ kind: "claimed"; claim: KeyClaim } | { kind: "replay"; answer: StoredAnswer }> {
  const { holder, claimOnce } = await claimantOf(route, subject, place, terms);
  // a duplicate meeting an indeterminate key asks the origin first, on a route that says where (reconcile.ts)
  const asked = { ref: holder.ref, settings: subject.settings, key: subject.key, origin: subject.origin };
  const c = noteClaim(holder.ref, await reconcileDuplicate(await claimOnce(), asked, claimOnce));
  if (c.kind !== "claimed") return countedAsOutcome(() => refused(c));
  const sluiceHeaders = {
    "sluice-fencing-token": String(c.fence),
    "idempotency-key": subject.key,
    ...traceHeader(place.trail),
  };
  return { kind: "claimed", claim: held(holder, place, terms, sluiceHeaders) };
}

/**
 * The key's record named, and a claim on it made ready for `subject`'s call: the claim's holder
 * (its record in the outcome store, where its outcome is written), and the claim, to be made, and
 * made again once a reconciliation settled the key.
 */
async function claimantOf(
  route: string,
  subject: KeySubject,
  place: GuardPlace,
  terms: GuardTerms,
): Promise<{ holder: KeyHolder; claimOnce: () => Promise<Claim> }> {
  const { settings } = subject;
  // a queued job's claim says so: until its delivery starts, nothing of it reached the origin
  const owner = terms.queued ? jobOwner() : crypto.randomUUID();
  const leaseMs = terms.queued ? terms.lifeMs : settings.lease;
  const claimTerms = { leaseMs, ttlMs: settings.ttl, lifeMs: terms.lifeMs, reconcileKey: reconcileKeyOf(subject) };
  const ref = await recordRef(
    place.claimStore,
    place.prefix,
    route,
    subject.principal,
    subject.key,
    place.trail,
    subject.client,
  );
  const holder: KeyHolder = { ref: { ...ref, store: place.outcomeStore }, owner, settings, retry: place.outcomeRetry };
  const once = () => claimRecord(ref, owner, subject.fingerprint, claimTerms, settings.replays);
  return { holder, claimOnce: () => claimed(once, holder, place) };
}

/** The key as the record keeps it for reconciliation: only on a route that reconciles. */
function reconcileKeyOf(subject: KeySubject): string | undefined {
  return subject.settings.reconcile === undefined ? undefined : subject.key;
}

/**
 * A claim's holder, as the outcome writes need it: the record (in the outcome store), the owner,
 * the route's settings, how a failed write is tried again.
 */
export interface KeyHolder {
  ref: RecordRef;
  owner: string;
  settings: IdempotencySettings;
  retry?: Backoff;
}

/**
 * Claims the key (`once`: one claim call), a duplicate of an in-flight request waiting (polling with backoff) for its
 * answer up to `wait`. A claim call that fails (a `StoreError`: its reply reset or late) may still
 * have run in Redis: the key is then this owner's, and nothing of the request has been sent, so it
 * is given back by its owner after the response (`release_unsent`: a claim that never landed
 * answers `not_owner`), never left to lapse into indeterminate for `ttl`.
 */
async function claimed(once: () => Promise<Claim>, holder: KeyHolder, place: GuardPlace): Promise<Claim> {
  const poll = { startMs: 50, maxMs: 500, budgetMs: holder.settings.wait };
  try {
    return await pollWhile(await once(), (r) => r.kind === "inflight", once, poll);
  } catch (e) {
    if (e instanceof StoreError) place.defer(giveBackUnsent(holder));
    throw e;
  }
}

/** Gives back `owner`'s claim if it landed and nothing of its request was sent (tried again while the store fails). */
function giveBackUnsent(holder: KeyHolder): Promise<void> {
  return settleQuietly(
    persisted(holder, () => releaseUnsent(holder.ref, holder.owner)).then(() => undefined),
    "idempotency_release_failed",
    { route: holder.ref.route },
  );
}

/**
 * The call goes on holding its claim. A live call's claim is renewed until it is settled (its call
 * may outlast `lease`); a queued one is held for the job's life for the consumer.
 */
function held(
  holder: KeyHolder,
  place: GuardPlace,
  terms: GuardTerms,
  sluiceHeaders: Record<string, string>,
): KeyClaim {
  const { ref, owner, settings } = holder;
  const renewal = terms.queued ? undefined : keepClaimed(ref, owner, settings.lease, renewingOf(place));
  if (renewal) place.defer(renewal.done);
  const noted = (outcome: Promise<KeyOutcome>): Promise<void> =>
    outcome.then((o) => noteKeyOutcome(ref, o)).finally(() => renewal?.stop());
  return {
    sluiceHeaders,
    ticket: { keyHash: ref.keyHash, fenceKey: ref.fenceKey, owner },
    settleWith: async (reply) => {
      const s = await settleKeyClaim(holder, reply);
      place.defer(noted(s.outcome));
      return s.response;
    },
    abandon: async () => {
      renewal?.stop();
      // tried again after the response if the first try fails; one that never lands lets the lease
      // lapse: the key is then indeterminate, not free
      const { tried, firstTry } = firstTryOf();
      const released = settleQuietly(
        persisted(holder, () => releaseOrHold(ref, owner, "release", undefined), tried),
        "idempotency_release_failed",
        { route: ref.route },
      );
      place.defer(released);
      await Promise.race([released, firstTry]);
    },
  };
}

/** A settled claim: the response for the client, and what became of the claim once the work after it is done. */
export interface KeySettlement {
  response: Response;
  /** Never rejects: a store failure is logged and told as `store_error`. */
  outcome: Promise<KeyOutcome>;
}

/**
 * Settles `owner`'s claim with what the origin did, and gives back the response for the client.
 * Only an origin that certainly did not act frees the key; an unknown outcome never does.
 * - An answer below 500 is stored for replays; storing reads the body from a tee as the client
 *   reads its own copy, and is the `outcome` (run it after the response, on the live path).
 * - Never sent, or a 5xx: `on_origin_error` says whether the key is released (a retry runs
 *   again) or held as indeterminate.
 * - A timeout: the client gets its 504 at once, while the origin's answer is still awaited (the
 *   reply's `late`, up to `LATE_ANSWER_MS`) and stored when it comes; the key stays in flight
 *   meanwhile, and becomes indeterminate if nothing comes.
 * - A connection that broke without an answer, or an answer that could not be relayed (an interim
 *   1xx): the origin may have acted on it, so the key is held as indeterminate whatever
 *   `on_origin_error` says; releasing it would let a retry run the side effect a second time.
 */
export async function settleKeyClaim(
  holder: KeyHolder,
  reply: OriginReply & { latencyMs?: number },
): Promise<KeySettlement> {
  noteOriginReply(holder.ref, reply);
  const res = reply.response;
  if (reply.outcome === "timeout" && reply.late) {
    return { response: res, outcome: storeLateAnswer(holder, reply) };
  }
  if (reply.outcome === "answered" && res.status < 500) {
    const [toClient, toStore] = res.body ? res.body.tee() : [null, null];
    return { response: new Response(toClient, res), outcome: storeAnswer(holder, res, toStore) };
  }
  // settled before the client hears of it: a retry that follows finds the key released or held (a
  // store that fails the first try is tried again after the response, the claim renewed meanwhile)
  const how = originDidNotAct(reply) ? holder.settings.on_origin_error : "hold";
  const { tried, firstTry } = firstTryOf();
  const outcome = releaseOrHoldKey(holder, how, reply, tried);
  await Promise.race([outcome, firstTry]);
  return { response: res, outcome };
}

/** What a caller waits for when only a write's first try is worth delaying a response for. */
function firstTryOf(): { tried: () => void; firstTry: Promise<void> } {
  let tried = (): void => undefined;
  const firstTry = new Promise<void>((resolve) => (tried = resolve));
  return { tried, firstTry };
}

/** The answer that came after the client's 504: stored as any answer would have been; none at all, indeterminate. */
async function storeLateAnswer(holder: KeyHolder, reply: OriginReply): Promise<KeyOutcome> {
  const late = await withLateAnswer(reply);
  if (late.outcome !== "answered") return releaseOrHoldKey(holder, "hold", late);
  if (late.response.status >= 500) {
    // nobody reads this answer: the client had its 504
    await discardBody(late.response.body);
    return releaseOrHoldKey(holder, holder.settings.on_origin_error, late);
  }
  const stored = await storeAnswer(holder, late.response, late.response.body);
  return stored === "completed" ? "late_answer" : stored;
}

/** Releases or holds the claim (the origin failed, or may have acted without an answer to keep: the reply, or the status it answered with). */
async function releaseOrHoldKey(
  holder: KeyHolder,
  how: "release" | "hold",
  reply: OriginReply | number,
  tried?: () => void,
): Promise<KeyOutcome> {
  const { ref, owner } = holder;
  const status = typeof reply === "number" ? reply : reply.outcome === "answered" ? reply.response.status : undefined;
  try {
    if (!(await persisted(holder, () => releaseOrHold(ref, owner, how, status), tried))) return "not_owner";
    return how === "release" ? "released" : "indeterminate";
  } catch {
    // never landed: the claim is no longer renewed, so its lease lapses into indeterminate
    return "store_error";
  }
}

/**
 * Stores the origin's answer for replays, reading its body from a tee as the client reads its own
 * copy. The answer is known: a failed write is tried again (`OUTCOME_WRITE_RETRY`), the claim
 * renewed meanwhile; one that never lands holds the key indeterminate (or, with Redis gone, lets
 * its lease lapse into it), so a retry is never run as if nothing had happened.
 */
async function storeAnswer(
  holder: KeyHolder,
  res: Response,
  body: ReadableStream<Uint8Array> | null,
): Promise<KeyOutcome> {
  const { ref, owner, settings } = holder;
  const headers = replayedHeaders(res);
  let read;
  try {
    read = await readCapped(body, settings.max_body);
  } catch {
    // the origin's body broke off after it answered: it acted, but there is no answer to replay
    return releaseOrHoldKey(holder, "hold", res.status);
  }
  const body64 = read.whole ? toBase64(read.bytes) : "";
  const whole = read.whole;
  try {
    const done = await persisted(holder, () => complete(ref, owner, res.status, headers, body64, whole, settings.ttl));
    return done ? "completed" : "not_owner";
  } catch {
    await settleQuietly(releaseOrHold(ref, owner, "hold", res.status), "idempotency_hold_failed", { route: ref.route });
    return "store_error";
  }
}

/** A write of a claim's outcome, tried again while it fails (`OUTCOME_WRITE_RETRY`); each failure is logged, the first told to `tried`. */
function persisted<T>(holder: KeyHolder, write: () => Promise<T>, tried?: () => void): Promise<T> {
  return retried(write, holder.retry ?? OUTCOME_WRITE_RETRY, (e) => {
    tried?.();
    logError("idempotency_complete_error", e, { route: holder.ref.route });
  });
}

type KeyRefused = { kind: "replay"; answer: StoredAnswer };

function refused(c: Exclude<Claim, { kind: "claimed" }>): KeyRefused {
  switch (c.kind) {
    case "completed":
      if (!c.stored)
        throw refusal(
          PROBLEMS.completedAnswerNotStored,
          "this key's request completed, but its answer was too large to keep; it will not run again",
        );
      return {
        kind: "replay",
        answer: { status: c.status, headers: c.headers, body: c.body ? fromBase64(c.body) : null },
      };
    case "inflight":
      throw refusal(
        PROBLEMS.requestInFlight,
        `a request with this key is still running (fencing token ${c.fence})`,
        { "Retry-After": "1" },
        { lease_left_ms: c.leftMs },
      );
    case "indeterminate":
      throw refusal(
        PROBLEMS.outcomeIndeterminate,
        "a request with this key failed at the origin after it may have taken effect; an operator must resolve it",
        { "Retry-After": "60" },
      );
    case "mismatch":
      throw refusal(
        PROBLEMS.idempotencyKeyReused,
        "this key was used with a different request (method, path, query, principal or body)",
      );
    case "replay_limited":
      throw tooManyReplays(c.retryAfterMs);
  }
}

/** The principal's replays are spent (`replays`): replays cost no tokens of the limits, so this is their bound. */
function tooManyReplays(retryAfterMs: number): Problem {
  return refusal(
    PROBLEMS.tooManyReplays,
    "this client has been answered with stored answers as often as the route allows for now",
    { "Retry-After": String(Math.max(1, Math.ceil(retryAfterMs / 1000))) },
    { retry_after_ms: retryAfterMs },
  );
}

function refusal(
  type: ProblemKind,
  detail: string,
  headers?: Record<string, string>,
  extensions?: Record<string, number>,
): Problem {
  return new Problem({ type, detail, headers, extensions });
}

/** A refusal of a duplicate is counted among the idempotency outcomes, not the limits' decisions. */
function countedAsOutcome(refuse: () => KeyRefused): KeyRefused {
  try {
    return refuse();
  } catch (e) {
    // the replay bound (a 429) is a limit like the others: it stays among the decisions
    throw e instanceof Problem && e.init.type !== PROBLEMS.tooManyReplays ? new IdempotencyRefusal(e.init) : e;
  }
}
