import sessionLua from "../../../../lua/session.lua";
import { asKeyHash, ownedHash } from "../../../identity/hash.js";
import { pseudonym, type IdKey } from "../../../identity/pseudonym.js";
import { LEDGER_MAXLEN } from "../idempotency/records.js";
import { ledgerKey, sessionFenceKey, sessionLockKey } from "../../../store/layout.js";
import type { Store } from "../../../store/redis.js";
import { scriptReply } from "../../../store/replies.js";

/** A session's lock: where it lives (home region's Redis) and how the ledger names it. */
export interface SessionRef {
  store: Store;
  prefix: string;
  route: string;
  /** The lock's: over [principal, session identity]: its key name. */
  hash: string;
  /**
   * What the ledger names the lock by: the keyed id of `hash` (src/identity/pseudonym.ts), never
   * `hash` itself (a session id is no secret, so its hash would give the principal back to guesses).
   */
  ledgerId: string;
  /** The ledger's length (`ledger_length`; the default when absent). */
  ledgerLength?: number;
}

export type Acquired =
  { kind: "granted"; fence: number; takeover: boolean } | { kind: "busy"; leftMs: number; fence: number };

/**
 * The lock of one principal's session, shared by every route keyed on the same session identity
 * (and principal). The principal is part of the lock's hash, so the same session id sent by
 * someone else is another lock: it can neither hold nor be held by this one.
 *
 * Fencing tokens come from one key for the whole deployment (lua/session.lua): origins remember
 * the highest token per `Sluice-Session` value, and a token that rises across every grant rises
 * under each value, while session ids a client invents leave no key behind once their locks go.
 */
export async function sessionRef(
  store: Store,
  prefix: string,
  route: string,
  principal: string,
  identity: string,
  idKey?: IdKey,
): Promise<SessionRef> {
  const hash = await ownedHash(principal, identity);
  return { store, prefix, route, hash, ledgerId: await pseudonym(idKey, hash) };
}

async function call(
  r: SessionRef,
  op: "acquire" | "renew" | "start" | "park" | "release" | "release_unsent",
  owner: string,
  rest: Array<string | number>,
): Promise<unknown[]> {
  // a ref may be rebuilt from a queue message (the consumer releases the lock): its hash is checked before it names a key
  const lock = sessionLockKey(r.prefix, asKeyHash(r.hash));
  const reply = await r.store.run(
    r.store.script(sessionLua),
    [lock, sessionFenceKey(r.prefix), ledgerKey(r.prefix)],
    [op, owner, r.route, r.ledgerId, r.ledgerLength ?? LEDGER_MAXLEN, ...rest],
  );
  return scriptReply(reply, "session.lua");
}

/**
 * One Lua call: the lock and the next fencing token, or how long the holder's lease has left. A
 * refusal is not ledgered: the caller counts it (`countSessionRefusal`).
 */
export async function acquire(r: SessionRef, owner: string, leaseMs: number): Promise<Acquired> {
  const [kind, a, b] = await call(r, "acquire", owner, [leaseMs]);
  return kind === "granted"
    ? { kind, fence: Number(a), takeover: Number(b) === 1 }
    : { kind: "busy", leftMs: Number(a), fence: Number(b) };
}

/** Extends `owner`'s lease to `leaseMs` from now, only while it holds the lock (false: it does not). */
export async function renew(r: SessionRef, owner: string, leaseMs: number): Promise<boolean> {
  const [result] = await call(r, "renew", owner, [leaseMs]);
  return result === "ok";
}

/**
 * A queued job's lock is taken up for its delivery (`start`: renewed to `leaseMs`, and marked: the
 * job may reach the origin from now on) or put back for a retry after a failure that did not act
 * (`park`: held `leaseMs`, the mark cleared). False: the lock is no longer `owner`'s.
 */
export async function mark(r: SessionRef, owner: string, how: "start" | "park", leaseMs: number): Promise<boolean> {
  const [result] = await call(r, how, owner, [leaseMs]);
  return result === "ok";
}

/** Releases the lock, only if `owner` still holds it. */
export async function release(r: SessionRef, owner: string): Promise<boolean> {
  const [result] = await call(r, "release", owner, []);
  return result === "ok";
}

/**
 * Releases a queued job's lock only if no delivery of the job may have begun (`start` never marked
 * it, or `park` cleared the mark); else it is left to run out its lease (`sent`).
 */
export async function releaseUnsent(r: SessionRef, owner: string): Promise<"ok" | "sent" | "not_owner"> {
  const [result] = await call(r, "release_unsent", owner, []);
  return result === "ok" || result === "sent" ? result : "not_owner";
}
