import { hasTrait, MAX_IN_FLIGHT } from "./registry.js";

/**
 * What a limit counts with, as the configuration writes it, by algorithm: `rate` per `period`
 * (and `burst`) for the four rate algorithms; `limit` requests in flight at once, each slot held
 * at most `lease`, for `concurrency`. The schema (src/features/rate-limit/schema.ts) checks the written fields
 * with `figureProblems` and compiles them with `compiledFigures`, so the rest of the code reads
 * `rate`, `period` and `burst` of every limit alike: a concurrency limit's are its limit, its lease
 * and its limit again (decide.lua takes them so: see its header).
 *
 * No runtime import of the script or the configuration: the schema imports this file.
 */

/** A limit's fields as written (durations already in ms), as far as its figures go. */
export interface WrittenFigures {
  algorithm: string;
  rate?: number;
  period?: number;
  burst?: number;
  limit?: number;
  lease?: boolean | number;
  cost?: number | string | object;
  tier?: string;
  rates?: unknown;
  scope?: string;
}

/** The shortest and longest slot lease (ms): a slot must outlive a normal request, and not outlive a crashed isolate by days. */
export const SLOT_LEASE_MS = { min: 1_000, max: 86_400_000 } as const;

/** Fields a limit writes wrongly for its algorithm, as [field, problem], in the order they are reported. */
export function figureProblems(l: WrittenFigures): Array<[string, string]> {
  if (hasTrait(l.algorithm, "inFlight")) return inFlightProblems(l);
  const problems: Array<[string, string]> = [];
  if (l.rate === undefined) problems.push(["rate", `is required for ${l.algorithm}: how many per \`period\``]);
  if (l.period === undefined) problems.push(["period", `is required for ${l.algorithm}: a duration like "1s"`]);
  if (l.limit !== undefined) problems.push(["limit", "applies to concurrency only (use rate and period)"]);
  if (typeof l.lease === "number")
    problems.push(["lease", `is true or false for ${l.algorithm} (a duration is a concurrency limit's slot lease)`]);
  return problems;
}

const TAKES =
  "a concurrency limit takes `limit` (requests in flight at once) and `lease` (how long a slot may be held)";

function inFlightProblems(l: WrittenFigures): Array<[string, string]> {
  const problems: Array<[string, string]> = [];
  const notHere = (field: string, why: string) => problems.push([field, `does not apply to concurrency: ${why}`]);
  if (l.limit === undefined) problems.push(["limit", `is required: ${TAKES}`]);
  for (const field of ["rate", "period", "burst"] as const) if (l[field] !== undefined) notHere(field, TAKES);
  if (typeof l.lease !== "number")
    problems.push([
      "lease",
      `${l.lease === undefined ? "is required" : "is a duration"} for concurrency: how long a slot may be held, like "30s"`,
    ]);
  else if (l.lease < SLOT_LEASE_MS.min || l.lease > SLOT_LEASE_MS.max)
    problems.push(["lease", 'must be from "1s" to "1d": a slot is freed by then if its request never releases it']);
  if (l.cost !== undefined && l.cost !== 1) notHere("cost", "a request holds one slot");
  if (l.tier !== undefined || l.rates !== undefined)
    notHere(l.tier !== undefined ? "tier" : "rates", "the limit is the same for every client");
  if (l.scope === "split")
    problems.push(["scope", 'cannot be "split" for concurrency: slots are held in one Redis ("region" or "global")']);
  return problems;
}

/** `rate`, `period` (ms) and `burst` as the rest of the code reads them (valid fields assumed: see figureProblems). */
export function compiledFigures(l: WrittenFigures): { rate: number; period: number; burst: number } {
  if (hasTrait(l.algorithm, "inFlight")) {
    const slots = Math.min(l.limit ?? 1, MAX_IN_FLIGHT);
    return { rate: slots, period: typeof l.lease === "number" ? l.lease : SLOT_LEASE_MS.min, burst: slots };
  }
  const rate = l.rate ?? 1;
  return { rate, period: l.period ?? 1_000, burst: l.burst ?? rate };
}
