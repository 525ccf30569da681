import type { Bucket } from "./decide.js";
import type { OverrideCopies } from "./overrides.js";
import { groupByStore, runDecide } from "./script-call.js";
import type { Decision } from "./types.js";

/*
 * Cost from the response (README): a limit with `cost = { response = "header:<name>", reserve,
 * max }` takes `reserve` at admission, and once the response reports its figure the charge is
 * settled to min(figure, max) with decide.lua's "settle" mode, which may leave the bucket in
 * debt. A response that never reports (no header, or not a whole number) keeps the reserve.
 */

/** The figure a response reports for `header`, bounded by `max`; undefined when it reports none. */
export function reportedCost(headers: Headers, header: string, max: number): number | undefined {
  const text = headers.get(header)?.trim();
  if (text === undefined || !/^\d{1,15}$/.test(text)) return undefined;
  return Math.min(Number(text), max);
}

/**
 * The buckets of an admitted decision charged from the response, each with the delta to settle
 * (the real figure less the reserve taken); those whose response reports nothing, or exactly the
 * reserve, are left out.
 */
export function settlements(buckets: readonly Bucket[], d: Decision, headers: Headers): Bucket[] {
  if (d.verdict === "reject") return [];
  return buckets.flatMap((b): Bucket[] => {
    const rc = b.limit.responseCost;
    const charged = d.outcomes.find((o) => o.key === b.key && o.limit === b.limit)?.allowed;
    if (!rc || !charged) return [];
    const figure = reportedCost(headers, rc.header, rc.max);
    const delta = figure === undefined ? 0 : figure - (b.params?.cost ?? b.limit.cost);
    return delta === 0 ? [] : [{ ...b, delta }];
  });
}

/** Settles the charges in the Redis that holds each bucket: one "settle" call per Redis. */
export async function settle(buckets: readonly Bucket[], overrides: OverrideCopies): Promise<void> {
  if (buckets.length === 0) return;
  const now = Date.now();
  await Promise.all(groupByStore([...buckets]).map((g) => runDecide(g, "settle", (b) => overrides.input(b, now))));
}
