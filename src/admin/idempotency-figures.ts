/*
 * The dashboard's idempotency figures per route (docs/operating.md: "How each panel is computed"),
 * from the hour's per-minute metrics hashes dashboardData has already read.
 */
import type { Config } from "../config/index.js";
import { duplicateFigures, idempotencyFigures, noFigures, type IdempotencyOutcome } from "../metrics/idempotency.js";
import { quantile } from "./figures.js";

/** One idempotent route's hour. */
export interface IdempotencyRow {
  route: string;
  outcomes: Record<IdempotencyOutcome, number>;
  /** Duplicates: replays, 409s while the first ran, and takeovers (those reached the origin). */
  duplicates: number;
  /** 0..1: duplicates answered without the origin (replay, in flight) over all duplicates; `null` without duplicates. */
  suppression_rate: number | null;
  /** 0..1: replays over the requests that came with a key (first, taken over, replay, in flight, mismatch); `null` without any. */
  replay_share: number | null;
  /** First arrivals (and takeovers) the origin answered, or failed, this hour, and those that failed (no answer, timeout, 5xx). */
  first_arrivals: number;
  first_failures: number;
  /** The origin latency of first arrivals at p50 and p99 (histogram bucket bounds); `null` without any. */
  first_p50_ms: number | null;
  first_p99_ms: number | null;
}

/** The figures of every route with an `idempotency` table, over `hour` (in configuration order). */
export function idempotencyRows(
  config: Config,
  hour: ReadonlyArray<Record<string, string | number>>,
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
      };
    });
}

const round = (x: number) => Math.round(x * 1000) / 1000;
