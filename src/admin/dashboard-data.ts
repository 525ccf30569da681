/*
 * The dashboard's data model: the figures of `GET /__sluice/api/dashboard`, which
 * src/admin/dashboard.ts builds (with figures.ts and idempotency-figures.ts) and the page's
 * panels draw (view/types.ts). Types only, so that builders and views both stand above it.
 */
import type { IdempotencyOutcome } from "../metrics/idempotency.js";
import type { McpOutcome } from "../metrics/mcp.js";

/** The figures of `GET /__sluice/api/dashboard`, which the page's panels draw (docs/operating.md: how each is computed). */
export interface DashboardData {
  /**
   * What the operator must know to read the page right, one sentence each: a route the
   * configuration names that no middleware of the app serves (`adminApi()`), routes served or
   * counted in the hour that the page does not show, no routes at all.
   */
  notices: string[];
  /** The last 60 minutes (epoch ms / 60 000), oldest first. */
  minutes: number[];
  routes: Array<{
    route: string;
    /** `adminApi()`: why the route shows nothing, when no middleware of the app serves it. */
    unserved?: string;
    /** Per minute of `minutes`. */
    allowed: number[];
    shed: number[];
    /** Each limit's decisions over the hour; `-` holds the requests no limit refused. */
    limits: Array<{ limit: string; allowed: number; shed: number }>;
    /** Automatic bans the route's limits gave in the last hour. */
    bans: number;
    /**
     * Adaptive routes: the limit in each region, the requests in flight under it (live slots of
     * its bucket; `null` when unread), the latency it follows and the unloaded latency it learnt.
     */
    adaptive?: Array<{
      region: string;
      limit: number;
      in_flight: number | null;
      latency_ms: number | null;
      base_ms: number;
    }>;
  }>;
  regions: Array<{
    region: string;
    /** The minutes `per_second`, the round trips and `local_share` are over: the current one (as far as it has gone) and those before it. */
    window_minutes: number;
    /** Decisions per second by verdict (`Sluice-Decision`), over the last 5 minutes. */
    per_second: Record<string, number>;
    /** The decision's Redis round trip as isolates measured it, last 5 minutes (`null`: none). */
    rtt_p50_ms: number | null;
    rtt_p99_ms: number | null;
    /** 0..1: decisions made in the isolate without a round trip (leases, blocked-bucket cache), last 5 minutes. */
    local_share: number;
    /** Seconds of the last hour spent deciding without Redis because it failed (each minute: 60 s × its share). */
    degraded_seconds: number;
  }>;
  /** The most refused identifiers over the hour, with the client's label and deny entry where kept. */
  top_blocked: Array<{ route: string; id: string; refusals: number; label?: string; entry?: string }>;
  /** Routes with an `idempotency` table: their outcomes, duplicate suppression and first arrivals over the hour. */
  idempotency: IdempotencyRow[];
  /** Routes with an `mcp` table: per tool, its calls' outcomes, duplicate suppression and first runs over the hour. */
  mcp: McpRouteRow[];
  /** Queue routes (`on_limit = "queue"`): their backlog now, and what their queue did over the hour. */
  queues: QueueRow[];
}

/** One queue route: its backlog as sluice counts it (src/features/shedding/queue/depth.ts), and its hour. */
export interface QueueRow {
  route: string;
  /** Jobs waiting now, and the oldest one's age (an upper bound); `null` when the count could not be read. */
  depth: number | null;
  oldest_age_ms: number | null;
  /** The route's `queue.max_depth`, `null` when unbounded. */
  max_depth: number | null;
  /** Over the hour: shed with the overflow (full, too long a wait), dropped unsent past `max_age`, delivered, failed. */
  shed_depth: number;
  shed_age: number;
  expired: number;
  delivered: number;
  failed: number;
  /** Mean time from enqueue to delivery of the hour's deliveries; `null` without any. */
  lag_mean_ms: number | null;
}

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
  /**
   * Keys indeterminate now (the origin may have acted, no answer kept), waiting for reconciliation
   * or an operator, and how long the oldest has waited (ms); absent when they could not be read.
   */
  indeterminate?: { waiting: number; oldest_ms: number | null };
}

/** One MCP route's hour: a row per tool its calls named (the tools' labels, src/metrics/mcp.ts), by name. */
export interface McpRouteRow {
  route: string;
  tools: McpToolRow[];
}

/** One tool's hour on an MCP route. */
export interface McpToolRow {
  tool: string;
  outcomes: Record<McpOutcome, number>;
  /** Calls sluice guarded: first, replay, joined, indeterminate, mismatch (a refusal is not told apart from a limit's). */
  guarded: number;
  /** 0..1: repeats answered without a run (replay, joined) over the guarded calls; `null` without any. */
  suppression_rate: number | null;
  /** 0..1: replays (the stored result at once) over the guarded calls; `null` without any. */
  replay_share: number | null;
  /** First runs whose answer came (or failed) this hour, and those that failed: an error, an `isError` result, no answer. */
  first_runs: number;
  first_failures: number;
  /** The time from sending a first run to its answer at p50 and p99 (histogram bucket bounds); `null` without any. */
  first_p50_ms: number | null;
  first_p99_ms: number | null;
}
