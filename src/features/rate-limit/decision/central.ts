import { StoreError } from "../../../store/deadline.js";
import type { Defer } from "../../../util/defer.js";
import { settleQuietly } from "../../../util/log.js";
import type { Bucket } from "../types.js";
import type { OverrideInput } from "./overrides.js";
import { groupByStore, runDecide, type GroupResult } from "./script-call.js";

/** One Redis's part of a central call: its buckets, and its answer (none when it failed). */
export interface CentralCall {
  buckets: Bucket[];
  result?: GroupResult;
}

/** What the central call came back with: each Redis's answer, whether all of them admitted, and the first failure. */
export interface CentralAnswer {
  calls: CentralCall[];
  /** Every Redis answered and admitted. */
  admitted: boolean;
  failure?: StoreError;
}

/**
 * The decision's one central call: decide.lua once per Redis involved (the region's, and the home
 * region's for `global` limits), sent in parallel, each all-or-nothing, with each bucket's
 * overrides (`overrides`) and lease ask (`asks`). All or nothing across them too: when one Redis
 * admits a take and another refuses (or fails), what the first charged is refunded, deferred (the
 * client does not wait for it), with the overrides it was charged with, so a refused request
 * keeps nothing anywhere.
 */
export async function decideCentrally(
  buckets: Bucket[],
  mode: "take" | "peek",
  overrides: ReadonlyMap<Bucket, OverrideInput>,
  asks: ReadonlyMap<Bucket, number>,
  defer: Defer,
): Promise<CentralAnswer> {
  const overrideOf = (b: Bucket) => overrides.get(b) ?? "read";
  const groups = groupByStore(buckets);
  const settled = await Promise.allSettled(
    groups.map((g) => runDecide(g, mode, overrideOf, (b) => ({ ask: asks.get(b) ?? 0 }))),
  );
  const calls = groups.map((g, i): CentralCall => {
    const s = settled[i] as PromiseSettledResult<GroupResult>;
    return s.status === "fulfilled" ? { buckets: g, result: s.value } : { buckets: g };
  });
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
  const admitted = !failed && calls.every((c) => c.result?.admitted);
  if (!admitted && mode === "take")
    for (const { result: r } of calls) {
      const charged = r?.admitted ? r.buckets.filter((_, i) => r.outcomes[i]?.allowed) : [];
      if (charged.length > 0) defer(settleQuietly(runDecide(charged, "refund", overrideOf), "refund_failed"));
    }
  if (!failed) return { calls, admitted };
  const reason: unknown = failed.reason;
  return { calls, admitted, failure: reason instanceof StoreError ? reason : new StoreError("error", String(reason)) };
}
