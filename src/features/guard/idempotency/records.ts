import idempotencyLua from "../../../../lua/idempotency.lua";
import { asKeyHash } from "../../../identity/hash.js";
import { idempotencyIndeterminateKey, idempotencyRecordKey, ledgerKey } from "../../../store/layout.js";
import type { RecordRef } from "./record-ref.js";
import { ledgerContext, noteIdempotency } from "./trail.js";
import { scriptReply } from "../../../store/replies.js";

export const LEDGER_MAXLEN = 10_000;

/** How fast one principal may be answered with replays on a route: `rate` per `period` (ms), `rate` at once. */
export interface ReplayBound {
  rate: number;
  period: number;
}

/** An answer as a key's record keeps it: the status, the headers replayed, the body in base64 ("" when not kept: `stored` false). */
export interface StoredAnswer {
  status: number;
  headers: Array<[string, string]>;
  body: string;
  stored: boolean;
}

/**
 * A stored answer as the scripts take it, then how long the record keeps it: one encoding for the
 * origin's answer (lua/idempotency.lua `complete`) and the reconcile endpoint's (lua/reconcile.lua
 * `found`), which a replay decodes alike.
 */
export function answerArgs(a: StoredAnswer, ttlMs: number): Array<string | number> {
  return [a.status, JSON.stringify(a.headers), a.body, a.stored ? 1 : 0, ttlMs];
}

export type Claim =
  | { kind: "claimed"; fence: number; takeover: boolean }
  | { kind: "mismatch" }
  | { kind: "inflight"; leftMs: number; fence: number }
  | ({ kind: "completed" } & StoredAnswer)
  /** `busy`: a lapsed claim whose call may still run (its longest life is not over): not to be reconciled yet. */
  | { kind: "indeterminate"; fence: number; busy?: boolean }
  | { kind: "replay_limited"; retryAfterMs: number };

function keysOf(r: RecordRef): string[] {
  // refs are also rebuilt from an operator's request and from queue messages: the hash is checked before it names a key
  const record = idempotencyRecordKey(r.prefix, r.route, asKeyHash(r.keyHash));
  const index = idempotencyIndeterminateKey(r.prefix, r.route);
  return [record, r.fenceKey, ledgerKey(r.prefix), r.replaysKey, r.clientReplaysKey ?? r.replaysKey, index];
}

async function call(r: RecordRef, op: string, owner: string, rest: Array<string | number>): Promise<unknown[]> {
  const reply = await r.store.run(r.store.script(idempotencyLua), keysOf(r), [
    op,
    owner,
    r.route,
    r.keyHash,
    r.trail?.ledgerLength ?? LEDGER_MAXLEN,
    ...rest,
    // always the last argument: the script reads the ledger's context from ARGV[#ARGV]
    ledgerContext(r.trail, r.principal),
  ]);
  return scriptReply(reply, "idempotency.lua");
}

/** How long a claim is held: its lease (renewed, or for a queued job its life), and the longest its call may run. */
export interface ClaimTerms {
  leaseMs: number;
  ttlMs: number;
  /**
   * The longest the claim's call may still run from the claim, renewed or not: the record is kept
   * at least that long plus `ttlMs`, so a holder cut off from Redis never leaves its key free
   * while its call may run (lua/idempotency.lua, `life_until`).
   */
  lifeMs: number;
  /** On a route that reconciles: the key itself, kept in the record so the origin can be asked about it by name. */
  reconcileKey?: string;
}

/**
 * Claims the key for `owner`, or says why not (see the script's contract). An answer from a
 * completed key is a replay, paid from the principal's and the client address's replay buckets
 * (`replays` each) in the same call.
 */
export async function claimRecord(
  r: RecordRef,
  owner: string,
  fp: string,
  terms: ClaimTerms,
  replays: ReplayBound,
): Promise<Claim> {
  // whole µs between replays, rounded up: never more than `rate` per `period`
  const intervalUs = Math.ceil((replays.period * 1000) / replays.rate);
  const { leaseMs, ttlMs, lifeMs } = terms;
  const args = [fp, leaseMs, ttlMs, intervalUs, replays.rate, lifeMs, terms.reconcileKey ?? ""];
  const [kind, a, b, c, d] = await call(r, "claim", owner, args);
  switch (kind) {
    case "claimed":
      return { kind, fence: Number(a), takeover: Number(b) === 1 };
    case "inflight":
      return { kind, leftMs: Number(a), fence: Number(b) };
    case "completed":
      return {
        kind,
        status: Number(a),
        headers: JSON.parse(String(b)) as Array<[string, string]>,
        body: String(c ?? ""),
        stored: String(d) === "1",
      };
    case "indeterminate":
      return { kind, fence: Number(a), busy: Number(b) === 1 };
    case "replay_limited":
      return { kind, retryAfterMs: Number(a) };
    default:
      return { kind: "mismatch" };
  }
}

/**
 * Extends `owner`'s lease to `leaseMs` from now, only while it holds the claim (false: it does
 * not). A claim that lapsed (its holder lost Redis for longer than the lease) stays
 * indeterminate, but its holder's renewal keeps its record `leaseMs` plus `ttl` longer: the holder
 * is alive and may still settle it.
 */
export async function renew(r: RecordRef, owner: string, leaseMs: number): Promise<boolean> {
  const [result] = await call(r, "renew", owner, [leaseMs]);
  return result === "ok";
}

/**
 * The owner a queued job's claim is held by: a claim whose delivery never started (`start`) reached
 * nobody, so once its lease lapses it may be taken over (any other lapsed claim is indeterminate).
 */
export function jobOwner(): string {
  return `job:${crypto.randomUUID()}`;
}

/**
 * A queued job's delivery begins: only if the claim is still the job's and its delivery never
 * started (`sent`: a copy of the job went this far before, and may have reached the origin). The
 * claim is then held `leaseMs`, to be renewed as a live request's is, and its record kept at
 * least the delivery's life (`lifeMs`) plus `ttl`.
 */
export async function startDelivery(
  r: RecordRef,
  owner: string,
  leaseMs: number,
  lifeMs: number,
): Promise<"ok" | "not_owner" | "sent"> {
  const [result] = await call(r, "start", owner, [leaseMs, lifeMs]);
  return result === "ok" || result === "sent" ? result : "not_owner";
}

/** A job's delivery failed without effect (a 5xx) and waits for its retry: held `leaseMs`, not started (false: not the job's). */
export async function park(r: RecordRef, owner: string, leaseMs: number): Promise<boolean> {
  const [result] = await call(r, "park", owner, [leaseMs]);
  return result === "ok";
}

/**
 * Counts and logs what a request's (final) claim gave it (the ledger has it from the script); gives
 * it back. A replay refused by the replay bound is a 429 like the limits', counted among decisions.
 */
export function noteClaim<C extends Claim>(r: RecordRef, c: C): C {
  if (c.kind === "claimed") noteIdempotency(r, c.takeover ? "takeover" : "claim", c.takeover ? "taken_over" : "first");
  else if (c.kind === "completed") noteIdempotency(r, "replay", "replay");
  else if (c.kind !== "replay_limited") noteIdempotency(r, undefined, c.kind === "inflight" ? "in_flight" : c.kind);
  return c;
}

/** Stores the origin's answer, only if `owner` still holds the claim. */
export async function complete(
  r: RecordRef,
  owner: string,
  status: number,
  headers: Array<[string, string]>,
  body: string,
  stored: boolean,
  ttlMs: number,
): Promise<boolean> {
  const [result] = await call(r, "complete", owner, answerArgs({ status, headers, body, stored }, ttlMs));
  if (result === "ok") noteIdempotency(r, "complete");
  return result === "ok";
}

/** Gives the key up (`release`) or marks it indeterminate (`hold`), only if `owner` holds it. */
export async function releaseOrHold(
  r: RecordRef,
  owner: string,
  how: "release" | "hold",
  originStatus: number | undefined,
): Promise<boolean> {
  const [result] = await call(r, how, owner, [originStatus ?? ""]);
  if (result === "ok") noteIdempotency(r, how, how === "release" ? "released" : "indeterminate");
  return result === "ok";
}

/**
 * Gives the key back only if nothing of it can have reached the origin: `owner`'s claim (in flight
 * or lapsed) not marked `sent` (a queued job's copy that never ran, or a claim whose reply was lost
 * before its request went anywhere). A claim marked `sent` is left held (`sent`: its lease runs out
 * into indeterminate); `not_owner` is not ledgered (the caller may never have held it).
 */
export async function releaseUnsent(r: RecordRef, owner: string): Promise<"released" | "sent" | "not_owner"> {
  const [result] = await call(r, "release_unsent", owner, [""]);
  if (result === "ok") noteIdempotency(r, "release", "released");
  return result === "ok" ? "released" : result === "sent" ? "sent" : "not_owner";
}

/** The operator's way out of `indeterminate`: release the key, or replay a given answer. */
export async function resolve(
  r: RecordRef,
  action: "release" | "replay",
  answer?: { status: number; headers: Array<[string, string]>; body: string; ttlMs: number },
): Promise<boolean> {
  const rest =
    action === "replay" && answer ? [answer.status, JSON.stringify(answer.headers), answer.body, answer.ttlMs] : [""];
  const [result] = await call(r, action === "release" ? "resolve_release" : "resolve_replay", "", rest);
  return result === "ok";
}
