import { readPart, type IdentityFacts } from "../../../identity/identify.js";
import { algorithm, type Algorithm } from "../algorithms/registry.js";

/**
 * Priorities (docs/algorithms.md, Priorities): a request is `critical`, `default` or `sheddable`, from its
 * route's `priority` (a name, or a header or JWT claim holding one). A limit's `reserve` keeps
 * fractions of its capacity for the priorities above the request's: decide.lua only ever sees
 * the result, a floor of whole tokens the request must leave in the bucket.
 */

/** Highest first. */
export const PRIORITIES = ["critical", "default", "sheddable"] as const;

export type Priority = (typeof PRIORITIES)[number];

/** Priorities a limit may reserve capacity for: every one but the lowest (nothing is below it to keep room from). */
export const RESERVABLE = ["critical", "default"] as const;

export type Reserve = Partial<Record<(typeof RESERVABLE)[number], number>>;

export function isPriority(value: string | undefined): value is Priority {
  return (PRIORITIES as readonly string[]).includes(value ?? "");
}

/**
 * The request's priority: the route's own name, or the value of its key (`header:<name>`,
 * `jwt:<claim>`) when that is one of the three names; anything else, or nothing, is `default`.
 */
export function priorityOf(setting: string, facts: IdentityFacts): Priority {
  if (isPriority(setting)) return setting;
  const value = readPart(setting, facts)?.trim().toLowerCase();
  return isPriority(value) ? value : "default";
}

/** What a floor is computed on: a limit's algorithm and reserve, and the figures its bucket is decided with. */
export interface FloorInput {
  algorithm: Algorithm;
  reserve?: Reserve;
  rate: number;
  burst: number;
}

/**
 * Whole tokens a request of `priority` must leave in the bucket: ceil(capacity × the reserve
 * fractions of the priorities strictly above it) (critical: 0). Capacity is `burst` for the
 * buckets, `rate` for the windows and concurrency (the registry's `capacity`).
 */
export function floorOf(l: FloorInput, priority: Priority): number {
  if (!l.reserve) return 0;
  const above = PRIORITIES.slice(0, PRIORITIES.indexOf(priority));
  const share = above.reduce((sum, p) => sum + (p === "sheddable" ? 0 : (l.reserve?.[p] ?? 0)), 0);
  const capacity = algorithm(l.algorithm).capacity === "burst" ? l.burst : l.rate;
  // a product such as 10 × 0.3 = 3.0000000000000004 must not round up to 4
  return Math.max(0, Math.ceil(capacity * share - 1e-9));
}
