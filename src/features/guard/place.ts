import type { Route } from "../../config/index.js";
import { LATE_ANSWER_MS } from "../../origin/forward.js";
import type { Store } from "../../store/redis.js";
import type { Defer } from "../../util/defer.js";
import { keepRenewing } from "../../util/renewal.js";
import type { RecordTrail } from "./idempotency/trail.js";

/**
 * How a known outcome (an answer to store, a key to release or hold) is written when the write
 * fails (a connection reset, a Redis that blips): again after 200 ms, doubling to 2 s, for up to
 * 6 s of pauses, the claim renewed meanwhile. An outcome that never lands leaves the key held:
 * indeterminate, never free.
 */
export const OUTCOME_WRITE_RETRY: Backoff = { startMs: 200, maxMs: 2_000, budgetMs: 6_000 };

/**
 * The longest writing a call's outcome takes once the call is over: the retries' pauses (6 s) and
 * their tries (six, each within the outcome store's 5 s), then a hold (5 s), rounded up. Part of a
 * claim's life (`callLifeMs`).
 */
export const OUTCOME_WRITE_LIFE_MS = 60_000;

/** Pauses of `startMs`, doubling up to `maxMs`, while they fit in `budgetMs` (src/util/poll.ts). */
export interface Backoff {
  startMs: number;
  maxMs: number;
  budgetMs: number;
}

/**
 * Where a guard's claims and locks live and how their lifecycle runs: plain values, made once per
 * request by an adapter (a Hono step, the queue consumer, an MCP call) and handed to `claim`.
 */
export interface GuardPlace {
  /** The deployment's `key_prefix`. */
  prefix: string;
  /** The home region's Redis within the decision budget: claims and session locks are taken here. */
  claimStore: Store;
  /** The same Redis with a fixed budget, for writing outcomes (the side effect happened: its outcome is worth waiting for). */
  outcomeStore: Store;
  /** The request's trace and session for the ledger, where outcomes are counted, the ledger's length, the ids' key. */
  trail?: RecordTrail;
  /** Keeps work going after the response (`ctx.waitUntil`): renewals, outcome writes. */
  defer: Defer;
  /** How a held claim or lock is kept alive while its call runs (src/util/renewal.ts; a test drives its own). */
  renewing?: typeof keepRenewing;
  /** How a failed outcome write is tried again (`OUTCOME_WRITE_RETRY`; a test shortens the pauses). */
  outcomeRetry?: Backoff;
}

/**
 * How long a claim is held: by a live call, renewed while it runs, which may run `lifeMs` from the
 * claim at most (`callLifeMs`); or by a queued job (`queued`), unrenewed for the job's life
 * (`lifeMs`) until the consumer takes it up.
 */
export interface GuardTerms {
  lifeMs: number;
  queued?: boolean;
}

/** The renewal loop a place runs (`keepRenewing` unless a test gave its own). */
export function renewingOf(place: Pick<GuardPlace, "renewing">): typeof keepRenewing {
  return place.renewing ?? keepRenewing;
}

/**
 * The longest a live call may hold its claim: its session's wait for the lock, `origin_timeout`
 * (twice on a route that fails over: the divert origin gets its own), the wait for a late answer
 * past it and the writing of its outcome. Its record is kept at least that long plus `ttl`
 * (lua/idempotency.lua, `life_until`), so a holder that loses Redis while its call runs never
 * leaves its key free while the origin may still be acting on it.
 */
export function callLifeMs(route: Pick<Route, "divertUrl" | "session" | "origin_timeout">): number {
  const calls = route.divertUrl === undefined ? 1 : 2;
  return (route.session?.wait ?? 0) + calls * route.origin_timeout + LATE_ANSWER_MS + OUTCOME_WRITE_LIFE_MS;
}
