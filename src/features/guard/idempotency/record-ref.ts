/*
 * Where one key's record lives, named three ways: from the principal and the key (a claim: the
 * names are hashes, the principal a keyed pseudonym), from the hash the ledger shows (an
 * operator's resolution, the reconcile sweep), or from a queued job's ticket (the consumer). The
 * record's scripts are called in records.ts.
 */
import { hashIdentifier, identityHash, ownedHash } from "../../../identity/hash.js";
import { pseudonym } from "../../../identity/pseudonym.js";
import { idempotencyFenceKey, idempotencyReplaysKey } from "../../../store/layout.js";
import type { Store } from "../../../store/redis.js";
import type { RecordTrail } from "./trail.js";

/** Where one key's record, its scope's fencing counter and the ledger live (home region's Redis). */
export interface RecordRef {
  store: Store;
  prefix: string;
  route: string;
  /** sha256(principal, key), the record's name and what the ledger shows. */
  keyHash: string;
  fenceKey: string;
  /** The principal's replay bucket (`"-"` for refs that never claim: no principal, never written). */
  replaysKey: string;
  /**
   * The client address's replay bucket, paid with the principal's (absent for refs that never
   * claim): principals a client invents (`auto` takes any `Authorization`) share its address's.
   */
  clientReplaysKey?: string;
  /**
   * What the ledger and the logs name the principal by: the keyed id of sha256(principal)
   * (src/identity/pseudonym.ts), never the principal, nor a hash a guess could be tested against.
   */
  principal?: string;
  /** The request's trace, session and latency for the ledger, and where its outcomes are counted. */
  trail?: RecordTrail;
}

/**
 * The record a claim names: its key hashed with its principal, the principal's (and the client
 * address's) replay buckets, and the principal and session as the ledger may show them (pseudonyms).
 */
export async function recordRef(
  store: Store,
  prefix: string,
  route: string,
  principal: string,
  key: string,
  trail?: RecordTrail,
  client?: string,
): Promise<RecordRef> {
  const principalHash = await identityHash(principal);
  return {
    store,
    prefix,
    route,
    keyHash: await ownedHash(principal, key),
    fenceKey: idempotencyFenceKey(prefix, route),
    replaysKey: idempotencyReplaysKey(prefix, route, principalHash),
    // spelled as the principal "ip" is: the same bucket when the principal is the address
    ...(client === undefined
      ? {}
      : { clientReplaysKey: idempotencyReplaysKey(prefix, route, await identityHash(client)) }),
    principal: await pseudonym(trail?.idKey, principalHash),
    trail: trail?.session
      ? { ...trail, session: await pseudonym(trail.idKey, await hashIdentifier(trail.session)) }
      : trail,
  };
}

/** A record named by its key hash (as the ledger shows it), for the operator's resolutions. */
export function refFromHash(store: Store, prefix: string, route: string, keyHash: string): RecordRef {
  // resolutions never claim: neither the fencing token nor a replay bucket is written
  return {
    store,
    prefix,
    route,
    keyHash,
    fenceKey: idempotencyFenceKey(prefix, route),
    replaysKey: noReplays(prefix, route),
  };
}

/** What a claim travelling with a queued job needs to be settled by the consumer: the record's names (hashes only) and the owner. */
export interface ClaimTicket {
  keyHash: string;
  fenceKey: string;
  owner: string;
}

/** The record a job's claim names, in `store`. */
export function refFromTicket(
  store: Store,
  prefix: string,
  route: string,
  t: ClaimTicket,
  trail?: RecordTrail,
): RecordRef {
  return {
    store,
    prefix,
    route,
    keyHash: t.keyHash,
    fenceKey: t.fenceKey,
    replaysKey: noReplays(prefix, route),
    trail,
  };
}

/** The replay slot of a ref that never claims: a key that is never written. */
function noReplays(prefix: string, route: string): string {
  return idempotencyReplaysKey(prefix, route, "-");
}
