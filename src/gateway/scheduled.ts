import type { Env } from "../env.js";
import { envConnections } from "../region/index.js";
import { rebalance, type RebalanceReport } from "../region/rebalance.js";
import { ConfigCache } from "../config/cache.js";
import type { Runtime } from "../runtime.js";
import { log } from "../util/log.js";

/** The cron trigger: rebalance split limits even when no request nudges it. */
export async function onSchedule(env: Env, runtime: Runtime): Promise<RebalanceReport | undefined> {
  const loaded = runtime.own(ConfigCache).of(env);
  if (!loaded.ok) return undefined;
  const config = loaded.config;
  const report = await rebalance(config, runtime.stores(envConnections(env, config.home_region), config));
  if (report.ran) log("rebalanced", { limits: report.limits });
  return report;
}
