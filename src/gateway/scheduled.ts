import type { Env } from "../env.js";
import { envConnections } from "../region/index.js";
import { rebalance, type RebalanceReport } from "../region/rebalance.js";
import { ConfigCache } from "../config/cache.js";
import type { Runtime } from "../runtime.js";
import { log } from "../util/log.js";
import { reconcileSweep } from "../features/guard/idempotency/reconcile-sweep.js";

/**
 * The cron trigger: rebalance split limits even when no request nudges it, and reconcile the
 * idempotency keys left indeterminate (src/features/guard/idempotency/reconcile-sweep.ts).
 */
export async function onSchedule(env: Env, runtime: Runtime): Promise<RebalanceReport | undefined> {
  const loaded = runtime.own(ConfigCache).of(env);
  if (!loaded.ok) return undefined;
  const config = loaded.config;
  const stores = runtime.stores(envConnections(env, config.home_region), config);
  const report = await rebalance(config, stores);
  if (report.ran) log("rebalanced", { limits: report.limits });
  const home = stores.offPath();
  if (home) {
    const swept = await reconcileSweep(config, home, runtime.metrics);
    const busy = swept.routes.filter((r) => r.asked > 0 || r.waiting > 0);
    if (busy.length > 0) log("reconcile_sweep", { routes: busy });
    // the counts of this run, written now: a cron invocation may be the isolate's last
    const flushes: Array<Promise<unknown>> = [];
    runtime.metrics.flush(config, stores, (work) => flushes.push(work), true);
    await Promise.allSettled(flushes);
  }
  return report;
}
