import type { Env } from "./env.js";
import { configOf } from "./gateway.js";
import { rebalance, type RebalanceReport } from "./region/rebalance.js";

/** The cron trigger: rebalance split limits even when no request nudges it. */
export async function onSchedule(env: Env): Promise<RebalanceReport | undefined> {
  const loaded = configOf(env);
  if (!loaded.ok) return undefined;
  const report = await rebalance(loaded.config, env);
  if (report.ran) console.log(JSON.stringify({ event: "rebalanced", limits: report.limits }));
  return report;
}
