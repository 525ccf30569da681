/*
 * The idempotency figures (docs/operating.md, Metrics): what happened to each request with a key, what
 * happened to each claim, and the origin latency of first arrivals, per route. Kept in the same
 * per-minute and all-time hashes as the decisions, under fields of two parts (`idem:{route}|…`),
 * so the readers of `route|limit|decision` pass over them.
 */
import { bucketBound, LAST_BUCKET, latencyBucket } from "./histogram.js";

/**
 * `first`: a first arrival claimed the key and went to the origin. `taken_over`: a duplicate took
 * over a claim whose lease had run out and went to the origin. `replay`: a duplicate answered
 * from the stored answer. `in_flight`: a duplicate refused 409 while its first arrival runs.
 * `mismatch`: the key came with another request, 422. `indeterminate`: a claim held as
 * indeterminate (the origin may have acted, no answer to keep), and each duplicate refused 409 for
 * it. `released`: a claim given up, so the next request with the key runs. `late_answer`: an
 * answer stored after the client was answered 504. `reconciled`: an indeterminate key (or a queued
 * job's delivery of unknown outcome) settled by what the origin's reconcile endpoint said;
 * `reconcile_failed`: the endpoint did not say (no answer in time, or neither 2xx nor 404).
 */
export const IDEMPOTENCY_OUTCOMES = [
  "first",
  "replay",
  "in_flight",
  "mismatch",
  "indeterminate",
  "released",
  "taken_over",
  "late_answer",
  "reconciled",
  "reconcile_failed",
] as const;

export type IdempotencyOutcome = (typeof IDEMPOTENCY_OUTCOMES)[number];

/** Where the counts go: the isolate's metrics buffer (src/metrics/index.ts), flushed with the decisions. */
export interface FieldCounter {
  countField(field: string, n?: number): void;
}

export const IDEM_FIELD = "idem:";
/** `idem_latency:{route}|{bucket}`: first arrivals by origin latency bucket (src/metrics/histogram.ts). */
export const IDEM_LATENCY_FIELD = "idem_latency:";
/** `idem_first:{route}|sum_ms`, `|count`, `|failed`: the histogram's sum and count, and the first arrivals that failed. */
export const IDEM_FIRST_FIELD = "idem_first:";

/** Counts one idempotency outcome of `route`. */
export function countIdempotency(metrics: FieldCounter, route: string, outcome: IdempotencyOutcome): void {
  metrics.countField(`${IDEM_FIELD}${route}|${outcome}`);
}

/**
 * Records the origin's answer to a first arrival (or a takeover): its latency in the route's
 * histogram, and whether it failed (no answer, a timeout, a 5xx).
 */
export function observeFirstArrival(metrics: FieldCounter, route: string, latencyMs: number, failed: boolean): void {
  const ms = Math.max(0, latencyMs);
  metrics.countField(`${IDEM_LATENCY_FIELD}${route}|${latencyBucket(ms)}`);
  metrics.countField(`${IDEM_FIRST_FIELD}${route}|sum_ms`, Math.round(ms));
  metrics.countField(`${IDEM_FIRST_FIELD}${route}|count`);
  if (failed) metrics.countField(`${IDEM_FIRST_FIELD}${route}|failed`);
}

/** One route's idempotency figures, read back from a metrics hash (or the sum of several). */
export interface IdempotencyFigures {
  outcomes: Record<IdempotencyOutcome, number>;
  /** Latency bucket → first arrivals. */
  latency: Map<number, number>;
  sumMs: number;
  count: number;
  failed: number;
}

const noOutcomes = (): Record<IdempotencyOutcome, number> =>
  Object.fromEntries(IDEMPOTENCY_OUTCOMES.map((o) => [o, 0])) as Record<IdempotencyOutcome, number>;

/** A route's figures before anything was counted. */
export const noFigures = (): IdempotencyFigures => ({
  outcomes: noOutcomes(),
  latency: new Map(),
  sumMs: 0,
  count: 0,
  failed: 0,
});

/** Every route's idempotency figures in `hashes` (summed), by route. */
export function idempotencyFigures(
  hashes: ReadonlyArray<Record<string, string | number>>,
): Map<string, IdempotencyFigures> {
  const routes = new Map<string, IdempotencyFigures>();
  const of = (route: string) => {
    const f = routes.get(route) ?? noFigures();
    routes.set(route, f);
    return f;
  };
  for (const hash of hashes) for (const [field, value] of Object.entries(hash)) addField(field, Number(value), of);
  return routes;
}

function addField(field: string, n: number, of: (route: string) => IdempotencyFigures): void {
  const bar = field.lastIndexOf("|");
  if (bar < 0 || !Number.isFinite(n)) return;
  const what = field.slice(bar + 1);
  const head = field.slice(0, bar);
  if (head.startsWith(IDEM_FIELD)) {
    const outcomes = of(head.slice(IDEM_FIELD.length)).outcomes;
    if (what in outcomes) outcomes[what as IdempotencyOutcome] += n;
  } else if (head.startsWith(IDEM_LATENCY_FIELD)) {
    const latency = of(head.slice(IDEM_LATENCY_FIELD.length)).latency;
    const bucket = Number(what);
    if (Number.isInteger(bucket)) latency.set(bucket, (latency.get(bucket) ?? 0) + n);
  } else if (head.startsWith(IDEM_FIRST_FIELD)) {
    const f = of(head.slice(IDEM_FIRST_FIELD.length));
    if (what === "sum_ms") f.sumMs += n;
    else if (what === "count") f.count += n;
    else if (what === "failed") f.failed += n;
  }
}

/**
 * The duplicates of a route and those answered without the origin: a replay, a 409 while the
 * first runs; a takeover is a duplicate that reached the origin. Mismatches are other requests,
 * and a duplicate refused for an indeterminate key is not told apart from the key turning so.
 */
export function duplicateFigures(f: IdempotencyFigures): { duplicates: number; suppressed: number } {
  const suppressed = f.outcomes.replay + f.outcomes.in_flight;
  return { duplicates: suppressed + f.outcomes.taken_over, suppressed };
}

/** Histogram bounds (ms) of the Prometheus histogram: every fourth bucket (one per doubling), up to about 65 s. */
const PROMETHEUS_BOUNDS = Array.from({ length: 17 }, (_, i) => 4 * i).filter((b) => b <= LAST_BUCKET);

/** `sluice_idempotency_total`, the first-arrival latency histogram and first-arrival failures, in the Prometheus text format. */
export function idempotencyLines(total: Record<string, string | number>, esc: (v: string) => string): string[] {
  const figures = [...idempotencyFigures([total])].sort(([a], [b]) => a.localeCompare(b));
  const lines = [
    "# HELP sluice_idempotency_total Requests with an idempotency key and claims, by route and outcome.",
    "# TYPE sluice_idempotency_total counter",
  ];
  for (const [route, f] of figures)
    for (const outcome of IDEMPOTENCY_OUTCOMES)
      lines.push(`sluice_idempotency_total{route="${esc(route)}",outcome="${outcome}"} ${f.outcomes[outcome]}`);
  lines.push(
    "# HELP sluice_idempotency_first_arrival_latency_ms Origin latency of first arrivals (and takeovers), by route.",
    "# TYPE sluice_idempotency_first_arrival_latency_ms histogram",
  );
  for (const [route, f] of figures) lines.push(...histogramLines(esc(route), f));
  lines.push(
    "# HELP sluice_idempotency_first_arrival_failures_total First arrivals whose origin did not answer, timed out or answered 5xx.",
    "# TYPE sluice_idempotency_first_arrival_failures_total counter",
  );
  for (const [route, f] of figures)
    lines.push(`sluice_idempotency_first_arrival_failures_total{route="${esc(route)}"} ${f.failed}`);
  return lines;
}

function histogramLines(route: string, f: IdempotencyFigures): string[] {
  const name = "sluice_idempotency_first_arrival_latency_ms";
  const lines = PROMETHEUS_BOUNDS.map((bound) => {
    let n = 0;
    for (const [bucket, count] of f.latency) if (bucket <= bound) n += count;
    return `${name}_bucket{route="${route}",le="${+bucketBound(bound).toFixed(3)}"} ${n}`;
  });
  lines.push(`${name}_bucket{route="${route}",le="+Inf"} ${f.count}`);
  lines.push(`${name}_sum{route="${route}"} ${f.sumMs}`, `${name}_count{route="${route}"} ${f.count}`);
  return lines;
}
