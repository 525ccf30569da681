/**
 * The Redis key layout, in one place: every key name sluice reads or writes is built here, and
 * `LAYOUT` says what each kind of key holds and how long it lives (docs/redis-layout.md
 * tables are checked against it by src/store/layout.test.ts). Key names are part of the public
 * contract: existing deployments hold data under them, so a name never changes.
 *
 * Client input reaches a key name only as a `KeyHash` (what `hashIdentifier` returns): every slot
 * that holds something a client chose takes that type, so a raw value does not compile. The other
 * parts are the configured `key_prefix`, route, limit and region names, all validated at load to
 * letters, digits, `_`, `.`, `-` (never a colon), which keeps every kind distinguishable by its
 * segments (a hash is 32 hex digits, so it never reads as `lease`, `fence` or `overrides`).
 */
import type { KeyHash } from "../identity/hash.js";

/** Which Redis holds a kind of key. */
export type LayoutStore = "home" | "region" | "every region" | "by scope";

export interface LayoutEntry {
  /** The key's name as docs/redis-layout.md writes it (two for a kind written in pairs). */
  readonly patterns: readonly [string, ...string[]];
  /** `by scope`: the region's Redis, the home region's for `global` limits. */
  readonly store: LayoutStore;
  readonly holds: string;
  readonly ttl: string;
}

/**
 * Every kind of key, worded as in docs/redis-layout.md's tables (cell for cell, so the test can compare
 * them). The bucket is described in prose above those tables, not in a row.
 */
export const LAYOUT = {
  bucket: {
    patterns: ["{key_prefix}:{route}:{limit}:{hash}"],
    store: "by scope",
    holds: "one short string per bucket, by algorithm",
    ttl: "the time until it would be back to its initial state",
  },
  share: {
    patterns: ["{key_prefix}:{route}:{limit}:share:{region}"],
    store: "region",
    holds: "`rate:burst`, the region's share",
    ttl: "7 days, rewritten every rebalance",
  },
  demand: {
    patterns: ["{key_prefix}:{route}:{limit}:demand:{region}"],
    store: "region",
    holds: "tokens asked for since the last rebalance (`INCRBY`; read with `GETDEL`)",
    ttl: "1 hour",
  },
  shareRecord: {
    patterns: ["{key_prefix}:{route}:{limit}:shares"],
    store: "home",
    holds: "hash region → `rate:burst`, what each region holds",
    ttl: "7 days",
  },
  rebalanceLock: {
    patterns: ["{key_prefix}:rebalance:lock"],
    store: "home",
    holds: "the rebalancer's lock (`SET NX PX`)",
    ttl: "`rebalance_every`",
  },
  job: {
    patterns: ["{key_prefix}:job:{sha256(id)}"],
    store: "home",
    holds: "a queued job's status (JSON)",
    ttl: "the route's `queue.status_ttl`",
  },
  jobLease: {
    patterns: ["{key_prefix}:job:{sha256(id)}:lease"],
    store: "home",
    holds: "held while a consumer delivers the job",
    ttl: "`origin_timeout` + 30 s (the wait for a late answer, and 5 s)",
  },
  queueDepth: {
    patterns: ["{key_prefix}:queue:{sha256(route)}"],
    store: "home",
    holds:
      "hash: a queue route's jobs waiting (`depth`: +1 at enqueue, −1 when a job is delivered, failed or dropped, one script call each) and the enqueue time (ms) of the oldest job that may be waiting (`head_at`)",
    ttl: "the route's `queue.status_ttl`, renewed on every enqueue and every job done",
  },
  queueClient: {
    patterns: ["{key_prefix}:queue:{sha256(route)}:client:{sha256(client)}"],
    store: "home",
    holds:
      "sorted set: one client's jobs waiting in a queue route with `queue.max_per_client` (job id → when its entry lapses: `max_age`, else `status_ttl`, after its enqueue), added and removed in the backlog's script calls",
    ttl: "the entries' lifetime, renewed on every enqueue of the client; deleted when its last job is done",
  },
  breaker: {
    patterns: ["{key_prefix}:{route}:breaker"],
    store: "region",
    holds: "a shared breaker's open-until time",
    ttl: "the cool-down",
  },
  overrides: {
    patterns: ["{key_prefix}:{route}:overrides"],
    store: "every region",
    holds:
      "hash of overrides: `{limit}:{hash}` / `{limit}:*` → `rate:burst:period_ms:until_ms`; copied by each isolate (`HGETALL` when `{key_prefix}:version` moved), read by the script (`HMGET`) only when the isolate has no copy, its copy was read at another version than the script's `MGET` finds (once per change), or the hash holds more than 1 000 fields",
    ttl: "the longest override's time",
  },
  adaptive: {
    patterns: ["{key_prefix}:{route}:adaptive:state:{hash}"],
    store: "region",
    holds:
      "hash: an adaptive route's limit, the latency it learnt, and the current window's reports (a latency histogram); the limit reaches decisions as the override `adaptive:{hash}`",
    ttl: "10 minutes, renewed on every report",
  },
  version: {
    patterns: ["{key_prefix}:version"],
    store: "every region",
    holds:
      "the change counter of what isolates copy (lists, overrides, bans; `INCR` by every writer after its write); read by every decision in its `MGET` and returned, so an isolate refetches a copy only when it moved",
    ttl: "at least 30 days from every bump, and at least as long as what the bump announced (so absent, reading 0, means nothing was ever written there: a fresh isolate then reads no override hash)",
  },
  lists: {
    patterns: ["{key_prefix}:lists"],
    store: "home",
    holds:
      "hash of deny/allow entries (JSON, each with its own expiry) and the routes' degrade switches; every read and write (`lua/access-lists.lua`) drops those that ran out first, and at most 1 000 automatic bans are in force (past it a ban drops the one that expires soonest)",
    ttl: "30 days, renewed on every change",
  },
  banRefusals: {
    patterns: ["{key_prefix}:{route}:{limit}:refusals:{sha256(entry)}"],
    store: "home",
    holds: "refusals of one client by a limit with `ban`, in the current window (`INCR`)",
    ttl: "the ban's `within`, from the first refusal",
  },
  banLevel: {
    patterns: ["{key_prefix}:{route}:{limit}:ban:{sha256(entry)}"],
    store: "home",
    holds: "the client's ban level: how many times the limit has banned it (`INCR`)",
    ttl: "24 hours after its last ban, or twice the longest `for` when that is longer",
  },
  adminAuth: {
    patterns: ["{key_prefix}:admin-auth:{sha256(ip)}"],
    store: "home",
    holds: "failed admin authentications of one client in the current window (`INCR`)",
    ttl: "1 minute, from the first attempt",
  },
  adminSession: {
    patterns: ["{key_prefix}:admin-session:{sha256(session)}"],
    store: "home",
    holds: "a signed-in dashboard session; sign-out deletes it",
    ttl: "`admin_session_idle` (30 minutes), renewed by every request of the session, never past its 12 hours",
  },
  metricsMinute: {
    patterns: ["{key_prefix}:metrics:m:{minute}", "{key_prefix}:metrics:blocked:{minute}"],
    store: "home",
    holds:
      "per-minute counts (decisions, bans, region figures, a round-trip histogram), one field per figure and isolate (`{figure}@{isolate}`, its running count, which readers add up), and refused identifiers",
    ttl: "2 hours",
  },
  metricsLabels: {
    patterns: ["{key_prefix}:metrics:labels:{minute}"],
    store: "home",
    holds:
      "hash: each refused client's display label and the deny entry a ban from its dashboard row writes, by route and hash (`labels`)",
    ttl: "2 hours",
  },
  metricsTotal: {
    patterns: ["{key_prefix}:metrics:total"],
    store: "home",
    holds: "all-time counts",
    ttl: "30 days, renewed by each isolate's first flush of the day",
  },
  idempotencyRecord: {
    patterns: ["{key_prefix}:idem:{route}:{sha256(principal, key)}"],
    store: "home",
    holds:
      "hash: state, owner, fence, fingerprint, lease, the call's life (`life_until`), the key's ttl, started and lapsed marks, stored answer",
    ttl: "in flight or lapsed: until the later of the lease and the call's life, plus `ttl` (a lapsed claim's holder renewing keeps it its lease plus `ttl` more); once settled, `ttl` from the outcome",
  },
  idempotencyFence: {
    patterns: ["{key_prefix}:idem:{route}:fence"],
    store: "home",
    holds: "the route's last fencing token (one key per route)",
    ttl: "30 days, renewed on every grant",
  },
  idempotencyReplays: {
    patterns: ["{key_prefix}:idem:{route}:replays:{sha256(principal)}"],
    store: "home",
    holds:
      "a principal's replay bucket: the Redis time (µs) its replays are paid up to; a client address's too, named as the principal `ip` would be (a replay pays both)",
    ttl: "until the bucket is full again (at most the `replays` period)",
  },
  idempotencyIndeterminate: {
    patterns: ["{key_prefix}:idem:{route}:indeterminate"],
    store: "home",
    holds:
      "sorted set: the route's indeterminate keys (their record's `sha256(principal, key)`) by when they became so (ms, Redis time); what the cron reconciles and the dashboard counts",
    ttl: "30 days, renewed whenever a key joins it; a member leaves when its key is settled, resolved or gone",
  },
  sessionLock: {
    patterns: ["{key_prefix}:session:{sha256([principal, identity])}"],
    store: "home",
    holds: "hash: owner, fence, lease, a queued job's started mark",
    ttl: "the lease plus a minute, moved by every renewal",
  },
  sessionFence: {
    patterns: ["{key_prefix}:session:fence"],
    store: "home",
    holds: "the last session fencing token (one key, whatever the session and principal)",
    ttl: "30 days, renewed on every grant",
  },
  ledger: {
    patterns: ["{key_prefix}:ledger"],
    store: "home",
    holds: "stream of idempotency and session outcomes (a session's refusals are counted, not ledgered)",
    ttl: "capped at ~`ledger_length` entries (10 000)",
  },
  audit: {
    patterns: ["{key_prefix}:audit"],
    store: "home",
    holds:
      "stream of the operators' changes (bans, allow entries, overrides, route modes), apart from the ledger so client traffic never trims them",
    ttl: "capped at ~10 000 entries; 366 days from the last change",
  },
} as const satisfies Record<string, LayoutEntry>;

export type LayoutKind = keyof typeof LAYOUT;

/** `{key_prefix}:{route}:`, how every key of one route starts (what a route's caches are forgotten by). */
export function routeKeyPrefix(prefix: string, route: string): string {
  return `${prefix}:${route}:`;
}

/** `routeKeyPrefix` read back from a bucket key, for code that holds only the key (prefix and route never hold a colon). */
export function routeKeyPrefixOf(bucket: string): string {
  return bucket.slice(0, bucket.lastIndexOf(":", bucket.lastIndexOf(":") - 1) + 1);
}

/** A bucket: one per route, limit and client (the client only as the hash of its identifier). */
export function bucketKey(prefix: string, route: string, limit: string, hash: KeyHash): string {
  return `${routeKeyPrefix(prefix, route)}${limit}:${hash}`;
}

/** A region's share of a `split` limit and the demand it saw since the last rebalance (both in that region's Redis). */
export function shareKeys(
  prefix: string,
  route: string,
  limit: string,
  region: string,
): { shareKey: string; demandKey: string } {
  const base = `${routeKeyPrefix(prefix, route)}${limit}`;
  return { shareKey: `${base}:share:${region}`, demandKey: `${base}:demand:${region}` };
}

/** What each region holds of a `split` limit, as the rebalancer last wrote it (home). */
export function shareRecordKey(prefix: string, route: string, limit: string): string {
  return `${routeKeyPrefix(prefix, route)}${limit}:shares`;
}

/** The rebalancer's lock, so that one isolate at a time rebalances (home). */
export function rebalanceLockKey(prefix: string): string {
  return `${prefix}:rebalance:lock`;
}

/** A queued job's status (home); the job id reaches it hashed. */
export function jobKey(prefix: string, idHash: KeyHash): string {
  return `${prefix}:job:${idHash}`;
}

/** Held while a consumer delivers the job, so a message delivered twice reaches the origin once. */
export function jobLeaseKey(prefix: string, idHash: KeyHash): string {
  return `${jobKey(prefix, idHash)}:lease`;
}

/**
 * A queue route's backlog (home): jobs waiting and the oldest one's enqueue time. The route name
 * reaches it hashed, as every identifier of the queue's keys does.
 */
export function queueDepthKey(prefix: string, routeHash: KeyHash): string {
  return `${prefix}:queue:${routeHash}`;
}

/**
 * One client's jobs waiting in a queue route (home), counted against its `queue.max_per_client`.
 * The client (the identity the refusing limit keys on, or the IP) reaches it hashed.
 */
export function queueClientKey(prefix: string, routeHash: KeyHash, clientHash: KeyHash): string {
  return `${queueDepthKey(prefix, routeHash)}:client:${clientHash}`;
}

/** A route's shared breaker: its open-until time, in the region's Redis. */
export function breakerKey(prefix: string, route: string): string {
  return `${routeKeyPrefix(prefix, route)}breaker`;
}

const OVERRIDES = "overrides";

/** The state of a route's adaptive limit in one region (its bucket's hash names the region): src/features/rate-limit/adaptive/. */
export function adaptiveStateKey(prefix: string, route: string, hash: KeyHash): string {
  return `${routeKeyPrefix(prefix, route)}adaptive:state:${hash}`;
}

/** A route's overrides hash (the same in every region's Redis). */
export function overridesKey(prefix: string, route: string): string {
  return `${routeKeyPrefix(prefix, route)}${OVERRIDES}`;
}

/** The overrides hash of the route a bucket key belongs to. */
export function overridesKeyOfBucket(bucket: string): string {
  return `${routeKeyPrefixOf(bucket)}${OVERRIDES}`;
}

/**
 * A field of the overrides hash: one client's (`{limit}:{bucket hash}`, the bucket key's tail) or,
 * without a hash, everybody's (`{limit}:*`). Fields, not keys, but the script reads them by name.
 */
export function overrideField(limit: string, hash?: KeyHash): string {
  return `${limit}:${hash ?? "*"}`;
}

/** The change counter of the copies isolates keep (lists, overrides), in every Redis. */
export function versionKey(prefix: string): string {
  return `${prefix}:version`;
}

/** The change counter of the Redis a bucket lives in: `{prefix}:version` from `{prefix}:{route}:{limit}:{hash}`. */
export function versionKeyOfBucket(bucket: string): string {
  return versionKey(keyPrefixOf(bucket));
}

/** The `key_prefix` a key starts with (a prefix never holds a colon). */
export function keyPrefixOf(key: string): string {
  return key.slice(0, key.indexOf(":"));
}

/** The deny and allow lists (home). */
export function listsKey(prefix: string): string {
  return `${prefix}:lists`;
}

/**
 * One client's refusals by a limit with `ban`, counted towards its next ban (home). The client is
 * named by its deny-list entry (`203.0.113.9`, `header:x-api-key=k1`), which reaches it hashed.
 */
export function banRefusalsKey(prefix: string, route: string, limit: string, entryHash: KeyHash): string {
  return `${routeKeyPrefix(prefix, route)}${limit}:refusals:${entryHash}`;
}

/** How many times a limit has banned one client, while its ban history lasts (home); the entry reaches it hashed. */
export function banLevelKey(prefix: string, route: string, limit: string, entryHash: KeyHash): string {
  return `${routeKeyPrefix(prefix, route)}${limit}:ban:${entryHash}`;
}

/** One client's failed admin authentications in the current window (home); the IP reaches it hashed. */
export function adminAuthKey(prefix: string, ipHash: KeyHash): string {
  return `${prefix}:admin-auth:${ipHash}`;
}

/** A dashboard session's record (the session id only hashed: it arrives in a cookie). */
export function adminSessionKey(prefix: string, idHash: KeyHash): string {
  return `${prefix}:admin-session:${idHash}`;
}

/**
 * The metrics of minute `minute` (epoch ms / 60 000): counts, refused identifiers and their display
 * labels; and the all-time counts (home).
 */
export function metricsKeys(
  prefix: string,
  minute: number,
): { minute: string; blocked: string; labels: string; total: string } {
  return {
    minute: `${prefix}:metrics:m:${minute}`,
    blocked: `${prefix}:metrics:blocked:${minute}`,
    labels: `${prefix}:metrics:labels:${minute}`,
    total: `${prefix}:metrics:total`,
  };
}

/** One idempotency key's record (home), named by sha256(principal, key). */
export function idempotencyRecordKey(prefix: string, route: string, keyHash: KeyHash): string {
  return `${prefix}:idem:${route}:${keyHash}`;
}

/**
 * The last fencing token of a route's idempotency claims (home): one key per route, so clients
 * that invent principals create no fencing keys.
 */
export function idempotencyFenceKey(prefix: string, route: string): string {
  return `${prefix}:idem:${route}:fence`;
}

/**
 * One principal's replay bucket on a route (home), or one client address's (named as the principal
 * `ip` would be: `principalHash` is the hash of its spelling). `"-"` names a key that is never written, for
 * calls that fill the script's slot but never replay (completions, resolutions).
 */
export function idempotencyReplaysKey(prefix: string, route: string, principalHash: KeyHash | "-"): string {
  return `${prefix}:idem:${route}:replays:${principalHash}`;
}

/** The route's indeterminate keys (home), a sorted set of record hashes: what reconciliation works through. */
export function idempotencyIndeterminateKey(prefix: string, route: string): string {
  return `${prefix}:idem:${route}:indeterminate`;
}

/** One principal's session lock (home), named by sha256([principal, session identity]). */
export function sessionLockKey(prefix: string, lockHash: KeyHash): string {
  return `${prefix}:session:${lockHash}`;
}

/** The last session fencing token, one key whatever the session and principal (home). */
export function sessionFenceKey(prefix: string): string {
  return `${prefix}:session:fence`;
}

/** The stream every idempotency and session outcome is appended to (home); the operators' changes have their own (`auditKey`). */
export function ledgerKey(prefix: string): string {
  return `${prefix}:ledger`;
}

/** The operators' audit trail (home), a stream of its own. */
export function auditKey(prefix: string): string {
  return `${prefix}:audit`;
}
