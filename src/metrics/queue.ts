/*
 * The queue figures (docs/operating.md, Metrics): shed requests the queue could not take, jobs
 * dropped as too old, jobs done and how long they waited, per route. Kept in the same per-minute
 * and all-time hashes as the decisions, under fields of two parts (`queue:{route}|…`,
 * `queue_lag:{route}|…`), so the readers of `route|limit|decision` pass over them. The backlog
 * itself (depth, oldest job) is read from Redis when asked (src/features/shedding/queue/depth.ts).
 */
import type { FieldCounter } from "./idempotency.js";

/**
 * `shed_depth` / `shed_client` / `shed_age`: shed requests answered with the overflow (the queue
 * full, the client's `max_per_client` share full, the wait past `max_age`). `expired`: jobs
 * dropped unsent because they were older than `max_age`. `delivered` / `failed`: jobs done with.
 */
export const QUEUE_OUTCOMES = ["shed_depth", "shed_client", "shed_age", "expired", "delivered", "failed"] as const;
export type QueueOutcome = (typeof QUEUE_OUTCOMES)[number];

export const QUEUE_FIELD = "queue:";
/** `queue_lag:{route}|sum_ms`, `|count`: from enqueue to delivery, of the jobs delivered. */
export const QUEUE_LAG_FIELD = "queue_lag:";

export function countQueue(metrics: FieldCounter, route: string, outcome: QueueOutcome): void {
  metrics.countField(`${QUEUE_FIELD}${route}|${outcome}`);
}

/** A job delivered `lagMs` after it was queued. */
export function observeDelivery(metrics: FieldCounter, route: string, lagMs: number): void {
  countQueue(metrics, route, "delivered");
  metrics.countField(`${QUEUE_LAG_FIELD}${route}|sum_ms`, Math.max(0, Math.round(lagMs)));
  metrics.countField(`${QUEUE_LAG_FIELD}${route}|count`);
}

export interface QueueFigures {
  outcomes: Record<QueueOutcome, number>;
  lagSumMs: number;
  lagCount: number;
}

const noFigures = (): QueueFigures => ({
  outcomes: Object.fromEntries(QUEUE_OUTCOMES.map((o) => [o, 0])) as Record<QueueOutcome, number>,
  lagSumMs: 0,
  lagCount: 0,
});

/** Every route's queue figures in `hashes` (summed), by route. */
export function queueFigures(hashes: ReadonlyArray<Record<string, string | number>>): Map<string, QueueFigures> {
  const routes = new Map<string, QueueFigures>();
  const of = (route: string): QueueFigures => {
    const f = routes.get(route) ?? noFigures();
    routes.set(route, f);
    return f;
  };
  for (const hash of hashes)
    for (const [field, value] of Object.entries(hash)) {
      const bar = field.lastIndexOf("|");
      const n = Number(value);
      if (bar < 0 || !Number.isFinite(n)) continue;
      const [head, what] = [field.slice(0, bar), field.slice(bar + 1)];
      if (head.startsWith(QUEUE_FIELD)) {
        const f = of(head.slice(QUEUE_FIELD.length));
        if (what in f.outcomes) f.outcomes[what as QueueOutcome] += n;
      } else if (head.startsWith(QUEUE_LAG_FIELD)) {
        const f = of(head.slice(QUEUE_LAG_FIELD.length));
        if (what === "sum_ms") f.lagSumMs += n;
        else if (what === "count") f.lagCount += n;
      }
    }
  return routes;
}

/** One queue route's backlog as read from Redis. */
export interface BacklogRow {
  route: string;
  depth: number;
  /** Now less the oldest waiting job's enqueue time; 0 when none waits. */
  oldestAgeMs: number;
}

/** The queue's counters (all time) and backlog gauges, in the Prometheus text format. */
export function queueLines(total: Record<string, string | number>, backlogs: readonly BacklogRow[]): string[] {
  const figures = [...queueFigures([total])].sort(([a], [b]) => a.localeCompare(b));
  const lines = [
    "# HELP sluice_queue_depth Jobs waiting in a queue route's queue (sluice's own count).",
    "# TYPE sluice_queue_depth gauge",
    ...backlogs.map((b) => `sluice_queue_depth{route="${esc(b.route)}"} ${b.depth}`),
    "# HELP sluice_queue_oldest_job_age_ms Age of the oldest job that may still wait (an upper bound), by route.",
    "# TYPE sluice_queue_oldest_job_age_ms gauge",
    ...backlogs.map((b) => `sluice_queue_oldest_job_age_ms{route="${esc(b.route)}"} ${Math.round(b.oldestAgeMs)}`),
    "# HELP sluice_queue_jobs_total Queue outcomes by route: shed (full, a client's share full, too long a wait), expired, delivered, failed.",
    "# TYPE sluice_queue_jobs_total counter",
  ];
  for (const [route, f] of figures)
    for (const outcome of QUEUE_OUTCOMES)
      lines.push(`sluice_queue_jobs_total{route="${esc(route)}",outcome="${outcome}"} ${f.outcomes[outcome]}`);
  lines.push(
    "# HELP sluice_queue_delivery_lag_ms From enqueue to delivery, of the jobs delivered, by route.",
    "# TYPE sluice_queue_delivery_lag_ms summary",
  );
  for (const [route, f] of figures)
    lines.push(
      `sluice_queue_delivery_lag_ms_sum{route="${esc(route)}"} ${f.lagSumMs}`,
      `sluice_queue_delivery_lag_ms_count{route="${esc(route)}"} ${f.lagCount}`,
    );
  return lines;
}

function esc(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}
