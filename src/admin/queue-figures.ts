/*
 * The dashboard's queue figures per route (docs/operating.md: "How each panel is computed"): the
 * backlog read now, and the hour's outcomes and delivery lag from the per-minute metrics hashes
 * dashboardData has already read.
 */
import type { Config } from "../config/index.js";
import { queueFigures, type BacklogRow } from "../metrics/queue.js";
import type { QueueRow } from "./dashboard-data.js";

/** The figures of every queue route, over `hour` (in configuration order); `backlogs` undefined when unread. */
export function queueRows(
  config: Config,
  hour: ReadonlyArray<Record<string, string | number>>,
  backlogs: readonly BacklogRow[] | undefined,
): QueueRow[] {
  const byRoute = queueFigures(hour);
  return config.routes
    .filter((r) => r.on_limit === "queue")
    .map((r) => {
      const f = byRoute.get(r.name);
      const o = f?.outcomes;
      const backlog = backlogs?.find((b) => b.route === r.name);
      return {
        route: r.name,
        depth: backlog?.depth ?? null,
        oldest_age_ms: backlog ? Math.round(backlog.oldestAgeMs) : null,
        max_depth: r.queue.max_depth ?? null,
        shed_depth: o?.shed_depth ?? 0,
        shed_age: o?.shed_age ?? 0,
        expired: o?.expired ?? 0,
        delivered: o?.delivered ?? 0,
        failed: o?.failed ?? 0,
        lag_mean_ms: f?.lagCount ? Math.round(f.lagSumMs / f.lagCount) : null,
      };
    });
}
