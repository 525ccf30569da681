import type { Route } from "../../config/index.js";
import { LATE_ANSWER_MS, originDidNotAct, withLateAnswer, type OriginReply } from "../../origin/forward.js";
import { fromBase64, toBase64 } from "../../util/base64.js";
import { declaresMoreThan, readCapped } from "../../util/body.js";
import { pollWhile, retried } from "../../util/poll.js";
import { Problem } from "../../problem.js";
import { PROBLEMS, type ProblemKind } from "../../problem-types.js";
import type { Store } from "../../store/redis.js";
import { keyFromFields } from "./derive.js";
import { canonicalBody, derivedKey, fingerprint, parseKey } from "./key.js";
import {
  claim,
  complete,
  jobOwner,
  noteClaim,
  recordRef,
  releaseUnsent,
  settleFailure,
  type Claim,
  type ClaimTerms,
  type ClaimTicket,
  type RecordRef,
} from "./records.js";
import { StoreError } from "../../store/deadline.js";
import { keepClaimed } from "./renewal.js";
import { IdempotencyRefusal } from "./refusal.js";
import { replayedHeaders } from "./replayed-headers.js";
import { reconcileDuplicate } from "./reconcile.js";
import { noteIdempotency, noteOriginReply, traceHeader, type RecordTrail } from "./trail.js";
import { discardBody, log, logError, settleQuietly } from "../../util/log.js";

export { LATE_ANSWER_MS };

/**
 * How a known outcome is written when the write fails (a connection reset, a Redis that blips):
 * again after 200 ms, doubling to 2 s, for up to 6 s of pauses, the claim renewed meanwhile. An
 * outcome that never lands leaves the key held: indeterminate, never free.
 */
const SETTLE_RETRY = { startMs: 200, maxMs: 2_000, budgetMs: 6_000 };

/**
 * The longest storing a call's outcome takes once the call is over: the retries' pauses (6 s) and
 * their tries (six, each within the settle store's 5 s), then a hold (5 s), rounded up. Part of a
 * claim's life (`callLifeMs`).
 */
export const SETTLE_LIFE_MS = 60_000;

/**
 * What became of a claim, once its request is done with:
 * - `completed`: the answer is stored for replays; `late_answer`: so is one that came after the
 *   client's 504 (a timeout).
 * - `released`: the origin certainly did not act (never sent, or a 5xx under `release`); a retry runs.
 * - `indeterminate`: the origin may have acted and no answer can be replayed; duplicates get 409.
 * - `not_owner`: the claim was no longer this request's (taken over); `store_error`: the store failed.
 */
export type SettleOutcome = "completed" | "late_answer" | "released" | "indeterminate" | "not_owner" | "store_error";

/**
 * Reports what became of a held claim once its request is done with. `released` and
 * `indeterminate` are counted where the record changes (`settleFailure`), `completed` needs no
 * report; an answer stored after the client's 504 is `late_answer`, and a claim that stopped
 * being this request's, or a store that failed, is logged.
 */
export function noteSettled(ref: RecordRef, outcome: SettleOutcome): void {
  if (outcome === "late_answer") noteIdempotency(ref, "late_answer", "late_answer");
  else if (outcome === "not_owner" || outcome === "store_error")
    log("idempotency_outcome", { route: ref.route, outcome });
}

/** The largest request body an idempotent request may carry: it is read whole to fingerprint it. */
export const MAX_REQUEST_BODY = 10 * 1024 * 1024;

export type IdempotencySettings = NonNullable<Route["idempotency"]>;

/** Who asks, for a key: whose key it is, and from which address. */
export interface Asker {
  /** Who asks (the configured identity, else the client IP): one client's key is not another's. */
  principal: string;
  /** The client's address, spelled as the principal "ip" is: its replays are bounded whatever principals it claims. */
  client?: string;
}

/** What a request is, for its key: the route it came by, and the method, path, query and principal that make it the same request. */
export interface ClaimSubject {
  route: string;
  /** The path the origin is asked for. */
  path: string;
  query: string;
  /**
   * Who asks, asked only of a request that has a key to claim (a request without one passes
   * unguarded, whoever it is): an `auto` principal whose token cannot be checked just now throws
   * a 503 problem (src/identity/principal.ts) rather than name another principal.
   */
  who: () => Promise<Asker>;
  /** The route's origin, where a `reconcile` path is asked (absent: an app without ORIGIN_URL). */
  origin?: URL;
}

/**
 * How a claim is held: by a live call, renewed while it runs, which may run `lifeMs` from the claim
 * at most (`callLifeMs`); or by a queued job (`queued`), unrenewed for the job's life (`lifeMs`)
 * until the consumer takes it up.
 */
export interface ClaimHold {
  lifeMs: number;
  queued?: boolean;
}

/** Where claims live: the home region's Redis with the decision budget (claim) and with a budget for storing answers (settle). */
export interface ClaimStores {
  prefix: string;
  claim: Store;
  settle: Store;
  /** The request's trace and session for the ledger, and where outcomes are counted. */
  trail?: RecordTrail;
}

/** What the idempotency step decided: go to the origin with these, or answer with the stored answer. */
export type Guarded =
  | {
      kind: "forward";
      request: Request;
      sluiceHeaders: Record<string, string>;
      settle: (reply: OriginReply & { latencyMs?: number }) => Promise<Response>;
      abandon: () => Promise<void>;
      /** Set when a claim is held: how long past a timeout the origin's answer is awaited (`LATE_ANSWER_MS`). */
      lateAnswerMs?: number;
      /** The claim, for a request that goes to the queue instead (absent: no key, nothing claimed). */
      ticket?: ClaimTicket;
    }
  | { kind: "replay"; response: Response };

/**
 * One side effect per key. Claims the request's key (header, or derived from the body), and
 * either lets it through, holding the claim, with a fencing token for the origin, or answers
 * with the stored answer (replay). Throws a `Problem`: 409 while another attempt is in flight or
 * the outcome is indeterminate, 422 when the key comes with a different request, 400 when a
 * required key is missing, 413 when the body is too large to fingerprint. `settle` stores the
 * origin's answer (or releases / holds the claim when the origin failed). `hold` says how long the
 * claim's call may run (its record is kept that long plus `ttl`, renewed or not) and whether it is
 * a queued request's, which holds its claim unrenewed until the consumer settles it.
 */
export async function guard(
  request: Request,
  settings: IdempotencySettings,
  subject: ClaimSubject,
  stores: ClaimStores,
  defer: (work: Promise<void>) => void,
  hold: ClaimHold,
): Promise<Guarded> {
  const keyed = await keyOf(request, settings, subject);
  if (!keyed) {
    // nothing to claim: the body is not needed, so it is streamed to the origin unread
    const unguarded = async () => undefined;
    return { kind: "forward", request, sluiceHeaders: {}, settle: async (reply) => reply.response, abandon: unguarded };
  }
  const { key, body, canonical } = keyed;
  const { principal, client } = await subject.who();
  const ref = await recordRef(stores.claim, stores.prefix, subject.route, principal, key, stores.trail, client);
  const fp = await fingerprint(request.method, subject.path, subject.query, principal, canonical);
  // a queued job's claim says so: until its delivery starts, nothing of it reached the origin
  const owner = hold.queued ? jobOwner() : crypto.randomUUID();
  const leaseMs = hold.queued ? hold.lifeMs : settings.lease;
  const terms = { leaseMs, ttlMs: settings.ttl, lifeMs: hold.lifeMs, reconcileKey: reconcileKeyOf(settings, key) };
  const claimOnce = () => claimed(ref, owner, fp, terms, settings, { settle: stores.settle, defer });
  // an indeterminate key is reconciled with the origin first, on a route that says where (reconcile.ts)
  const asked = { ref: { ...ref, store: stores.settle }, settings, key, origin: subject.origin };
  const c = noteClaim(ref, await reconcileDuplicate(await claimOnce(), asked, claimOnce));
  if (c.kind !== "claimed") return countedAsOutcome(() => refused(c));

  const sluiceHeaders = {
    "sluice-fencing-token": String(c.fence),
    "idempotency-key": key,
    ...traceHeader(stores.trail),
  };
  const holding: ClaimHeld = { ref: { ...ref, store: stores.settle }, owner, settings, defer, queued: hold.queued };
  return held(holding, rebuilt(request, body), sluiceHeaders);
}

/**
 * Claims the key, a duplicate of an in-flight request waiting (polling with backoff) for its
 * answer up to `wait`. A claim call that fails (a `StoreError`: its reply reset or late) may still
 * have run in Redis: the key is then this owner's, and nothing of the request has been sent, so it
 * is given back by its owner after the response (`release_unsent`: a claim that never landed
 * answers `not_owner`), never left to lapse into indeterminate for `ttl`.
 */
async function claimed(
  ref: RecordRef,
  owner: string,
  fp: string,
  terms: ClaimTerms,
  settings: IdempotencySettings,
  after: { settle: Store; defer: (work: Promise<void>) => void },
): Promise<Claim> {
  const once = () => claim(ref, owner, fp, terms, settings.replays);
  const poll = { startMs: 50, maxMs: 500, budgetMs: settings.wait };
  try {
    return await pollWhile(await once(), (r) => r.kind === "inflight", once, poll);
  } catch (e) {
    if (e instanceof StoreError) after.defer(giveBackUnsent({ ...ref, store: after.settle }, owner));
    throw e;
  }
}

/** The key as the record keeps it for reconciliation: only on a route that reconciles. */
function reconcileKeyOf(settings: IdempotencySettings, key: string): string | undefined {
  return settings.reconcile === undefined ? undefined : key;
}

/** Gives back `owner`'s claim if it landed and nothing of its request was sent (tried again while the store fails). */
function giveBackUnsent(ref: RecordRef, owner: string): Promise<void> {
  return settleQuietly(
    persisted(ref, () => releaseUnsent(ref, owner)).then(() => undefined),
    "idempotency_release_failed",
    { route: ref.route },
  );
}

/** A claim this request holds, settled in `ref` (the settle store). */
interface ClaimHeld {
  ref: RecordRef;
  owner: string;
  settings: IdempotencySettings;
  defer: (work: Promise<void>) => void;
  /** A queued request's: held for the job's life for the consumer, not renewed. */
  queued?: boolean;
}

/**
 * The request goes on holding its claim. A live request's claim is renewed until it is settled
 * (its call may outlast `lease`); a queued one is held for the job's life for the consumer.
 */
function held(
  { ref, owner, settings, defer, queued }: ClaimHeld,
  request: Request,
  sluiceHeaders: Record<string, string>,
): Guarded {
  const renewal = queued ? undefined : keepClaimed(ref, owner, settings.lease);
  if (renewal) defer(renewal.done);
  const settled = (outcome: Promise<SettleOutcome>): Promise<void> =>
    outcome.then((o) => noteSettled(ref, o)).finally(() => renewal?.stop());
  return {
    kind: "forward",
    request,
    sluiceHeaders,
    settle: async (reply) => {
      const s = await settleClaim(ref, owner, settings, reply);
      defer(settled(s.settled));
      return s.response;
    },
    // sluice itself decided not to forward (a busy session, a full queue): the key is free for the retry
    abandon: async () => {
      renewal?.stop();
      // tried again after the response if the first try fails; one that never lands lets the lease
      // lapse: the key is then indeterminate, not free
      const { tried, firstTry } = firstTryOf();
      const released = settleQuietly(
        persisted(ref, () => settleFailure(ref, owner, "release", undefined), tried),
        "idempotency_release_failed",
        { route: ref.route },
      );
      defer(released);
      await Promise.race([released, firstTry]);
    },
    lateAnswerMs: LATE_ANSWER_MS,
    ticket: { keyHash: ref.keyHash, fenceKey: ref.fenceKey, owner },
  };
}

/** A request's key and the body it was read from, or nothing to claim (no key, none required or derived). */
interface Keyed {
  key: string;
  body: Uint8Array;
  /** What the fingerprint hashes of the body: its canonical form, or with `derive.fields` those fields'. */
  canonical: Uint8Array;
}

/**
 * The request's key: with `derive = { fields }`, always the fields' (the header is not read);
 * else the header's, else with `derive = true` one made from the canonical body. Throws a 400
 * problem for a malformed key, a required key that is missing, or fields the body lacks.
 */
async function keyOf(
  request: Request,
  settings: IdempotencySettings,
  subject: ClaimSubject,
): Promise<Keyed | undefined> {
  if (typeof settings.derive === "object") {
    const body = await readBody(request);
    const fields = await keyFromFields({ method: request.method, ...subject }, body, settings.derive);
    return { key: fields.key, body, canonical: fields.canonical };
  }
  const parsed = parseKey(request.headers.get("idempotency-key"));
  if (!parsed.ok) throw refusal(PROBLEMS.invalidIdempotencyKey, parsed.detail);
  if (parsed.key === undefined && !settings.derive) {
    if (!settings.required) return undefined;
    // what the client sent (method and path), then the route it met, by name
    const path = new URL(request.url).pathname;
    const detail = `${request.method} ${path} needs an Idempotency-Key header (route "${subject.route}")`;
    throw refusal(PROBLEMS.idempotencyKeyRequired, detail);
  }
  const body = await readBody(request);
  const canonical = canonicalBody(body, request.headers.get("content-type"), settings.ignore);
  return { key: parsed.key ?? (await keyOfBody(request.method, subject, canonical)), body, canonical };
}

/** A key for a request that brought none (`derive`): the same request, the same key; method, path, query, who asks, what body. */
async function keyOfBody(method: string, subject: ClaimSubject, canonical: Uint8Array): Promise<string> {
  const { principal } = await subject.who();
  return derivedKey(method, subject.path, subject.query, principal, canonical);
}

/** The whole body, to fingerprint it: 413 past the cap. */
async function readBody(request: Request): Promise<Uint8Array> {
  const read = declaresMoreThan(request, MAX_REQUEST_BODY)
    ? { whole: false as const }
    : await readCapped(request.body, MAX_REQUEST_BODY);
  if (!read.whole)
    throw refusal(PROBLEMS.requestTooLarge, `idempotent requests may carry at most ${MAX_REQUEST_BODY} bytes`);
  return read.bytes;
}

/** A settled claim: the response for the client, and what became of the claim once the work after it is done. */
export interface Settlement {
  response: Response;
  /** Never rejects: a store failure is logged and told as `store_error`. */
  settled: Promise<SettleOutcome>;
}

/**
 * Settles `owner`'s claim with what the origin did, and gives back the response for the client.
 * Only an origin that certainly did not act frees the key; an unknown outcome never does.
 * - An answer below 500 is stored for replays; storing reads the body from a tee as the client
 *   reads its own copy, and is `settled` (run it after the response, on the live path).
 * - Never sent, or a 5xx: `on_origin_error` says whether the key is released (a retry runs
 *   again) or held as indeterminate.
 * - A timeout: the client gets its 504 at once, while the origin's answer is still awaited (the
 *   reply's `late`, up to `LATE_ANSWER_MS`) and stored when it comes; the key stays in flight
 *   meanwhile, and becomes indeterminate if nothing comes.
 * - A connection that broke without an answer, or an answer that could not be relayed (an interim
 *   1xx): the origin may have acted on it, so the key is held as indeterminate whatever
 *   `on_origin_error` says; releasing it would let a retry run the side effect a second time.
 */
export async function settleClaim(
  ref: RecordRef,
  owner: string,
  settings: IdempotencySettings,
  reply: OriginReply & { latencyMs?: number },
): Promise<Settlement> {
  noteOriginReply(ref, reply);
  const res = reply.response;
  if (reply.outcome === "timeout" && reply.late) {
    return { response: res, settled: settleLate(ref, owner, settings, reply) };
  }
  if (reply.outcome === "answered" && res.status < 500) {
    const [toClient, toStore] = res.body ? res.body.tee() : [null, null];
    return { response: new Response(toClient, res), settled: storeAnswer(ref, owner, settings, res, toStore) };
  }
  // settled before the client hears of it: a retry that follows finds the key released or held (a
  // store that fails the first try is tried again after the response, the claim renewed meanwhile)
  const how = originDidNotAct(reply) ? settings.on_origin_error : "hold";
  const { tried, firstTry } = firstTryOf();
  const outcome = settleFailed(ref, owner, how, reply, tried);
  await Promise.race([outcome, firstTry]);
  return { response: res, settled: outcome };
}

/** What a caller waits for when only a write's first try is worth delaying a response for. */
function firstTryOf(): { tried: () => void; firstTry: Promise<void> } {
  let tried = (): void => undefined;
  const firstTry = new Promise<void>((resolve) => (tried = resolve));
  return { tried, firstTry };
}

/** The answer that came after the client's 504: stored as any answer would have been; none at all, indeterminate. */
async function settleLate(
  ref: RecordRef,
  owner: string,
  settings: IdempotencySettings,
  reply: OriginReply,
): Promise<SettleOutcome> {
  const late = await withLateAnswer(reply);
  if (late.outcome !== "answered") return settleFailed(ref, owner, "hold", late);
  if (late.response.status >= 500) {
    // nobody reads this answer: the client had its 504
    await discardBody(late.response.body);
    return settleFailed(ref, owner, settings.on_origin_error, late);
  }
  const stored = await storeAnswer(ref, owner, settings, late.response, late.response.body);
  return stored === "completed" ? "late_answer" : stored;
}

/** Releases or holds the claim (the origin failed, or may have acted without an answer to keep: the reply, or the status it answered with). */
async function settleFailed(
  ref: RecordRef,
  owner: string,
  how: "release" | "hold",
  reply: OriginReply | number,
  tried?: () => void,
): Promise<SettleOutcome> {
  const status = typeof reply === "number" ? reply : reply.outcome === "answered" ? reply.response.status : undefined;
  try {
    if (!(await persisted(ref, () => settleFailure(ref, owner, how, status), tried))) return "not_owner";
    return how === "release" ? "released" : "indeterminate";
  } catch {
    // never landed: the claim is no longer renewed, so its lease lapses into indeterminate
    return "store_error";
  }
}

/**
 * Stores the origin's answer for replays, reading its body from a tee as the client reads its own
 * copy. The answer is known: a failed write is tried again (`SETTLE_RETRY`), the claim renewed
 * meanwhile; one that never lands holds the key indeterminate (or, with Redis gone, lets its lease
 * lapse into it), so a retry is never run as if nothing had happened.
 */
async function storeAnswer(
  ref: RecordRef,
  owner: string,
  settings: IdempotencySettings,
  res: Response,
  body: ReadableStream<Uint8Array> | null,
): Promise<SettleOutcome> {
  const headers = replayedHeaders(res);
  let read;
  try {
    read = await readCapped(body, settings.max_body);
  } catch {
    // the origin's body broke off after it answered: it acted, but there is no answer to replay
    return settleFailed(ref, owner, "hold", res.status);
  }
  const body64 = read.whole ? toBase64(read.bytes) : "";
  const whole = read.whole;
  try {
    const done = await persisted(ref, () => complete(ref, owner, res.status, headers, body64, whole, settings.ttl));
    return done ? "completed" : "not_owner";
  } catch {
    await settleQuietly(settleFailure(ref, owner, "hold", res.status), "idempotency_hold_failed", { route: ref.route });
    return "store_error";
  }
}

/** A write of a claim's outcome, tried again while it fails (`SETTLE_RETRY`); each failure is logged, the first told to `tried`. */
function persisted<T>(ref: RecordRef, write: () => Promise<T>, tried?: () => void): Promise<T> {
  return retried(write, SETTLE_RETRY, (e) => {
    tried?.();
    logSettleError(ref, e);
  });
}

function logSettleError(ref: RecordRef, e: unknown): void {
  logError("idempotency_complete_error", e, { route: ref.route });
}

function refused(c: Exclude<Claim, { kind: "claimed" }>): Guarded {
  switch (c.kind) {
    case "completed":
      if (!c.stored)
        throw refusal(
          PROBLEMS.completedAnswerNotStored,
          "this key's request completed, but its answer was too large to keep; it will not run again",
        );
      return {
        kind: "replay",
        response: new Response(c.body ? fromBase64(c.body) : null, {
          status: c.status,
          headers: [...c.headers, ["idempotent-replayed", "true"]],
        }),
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
function countedAsOutcome(refuse: () => Guarded): Guarded {
  try {
    return refuse();
  } catch (e) {
    // the replay bound (a 429) is a limit like the others: it stays among the decisions
    throw e instanceof Problem && e.init.type !== PROBLEMS.tooManyReplays ? new IdempotencyRefusal(e.init) : e;
  }
}

function rebuilt(request: Request, body: Uint8Array): Request {
  const hasBody = request.method !== "GET" && request.method !== "HEAD";
  return new Request(request.url, { method: request.method, headers: request.headers, body: hasBody ? body : null });
}
