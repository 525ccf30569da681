/*
 * The dashboard's idempotency figures per route (docs/operating.md: "How each panel is computed"),
 * from the hour's per-minute metrics hashes dashboardData has already read.
 */
import type { Config } from "../config/index.js";
import { duplicateFigures, idempotencyFigures, noFigures } from "../metrics/idempotency.js";
import type { IdempotencyRow } from "./dashboard-data.js";
import { quantile } from "./figures.js";
import type { IndeterminateWaiting } from "../features/guard/idempotency/reconcile-sweep.js";

/** The figures of every route with an `idempotency` table, over `hour` (in configuration order). */
export function idempotencyRows(
  config: Config,
  hour: ReadonlyArray<Record<string, string | number>>,
  waiting?: ReadonlyMap<string, IndeterminateWaiting>,
): IdempotencyRow[] {
  const byRoute = idempotencyFigures(hour);
  return config.routes
    .filter((r) => r.idempotency)
    .map((r) => {
      const f = byRoute.get(r.name) ?? noFigures();
      const o = f.outcomes;
      const { duplicates, suppressed } = duplicateFigures(f);
      const keyed = o.first + o.taken_over + o.replay + o.in_flight + o.mismatch;
      return {
        route: r.name,
        outcomes: { ...o },
        duplicates,
        suppression_rate: duplicates ? round(suppressed / duplicates) : null,
        replay_share: keyed ? round(o.replay / keyed) : null,
        first_arrivals: f.count,
        first_failures: f.failed,
        first_p50_ms: quantile(f.latency, 0.5),
        first_p99_ms: quantile(f.latency, 0.99),
        ...indeterminateOf(waiting?.get(r.name)),
      };
    });
}

const round = (x: number) => Math.round(x * 1000) / 1000;

function indeterminateOf(w: IndeterminateWaiting | undefined): Pick<IdempotencyRow, "indeterminate"> {
  return w ? { indeterminate: { waiting: w.waiting, oldest_ms: w.oldestMs } } : {};
}
