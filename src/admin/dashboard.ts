import type { Config } from "../config/index.js";
import type { Env } from "../env.js";
import { asHash, metricKeys, minuteOf } from "../metrics/index.js";
import { offPathStore } from "../region/index.js";

const ALLOWED = new Set(["allow", "shadow", "degraded", "replay"]);

export interface DashboardData {
  minutes: number[];
  routes: Array<{ route: string; allowed: number[]; shed: number[] }>;
  top_blocked: Array<{ route: string; id: string; refusals: number }>;
}

/**
 * The last 60 minutes per route (allowed vs shed, from the per-minute metrics) and the most
 * refused identifiers (hashed), read in one pipeline from the home region's Redis.
 */
export async function dashboardData(config: Config, env: Env): Promise<DashboardData> {
  const now = minuteOf(Date.now());
  const minutes = Array.from({ length: 60 }, (_, i) => now - 59 + i);
  const routes = config.routes.map((r) => ({ route: r.name, allowed: minutes.map(() => 0), shed: minutes.map(() => 0) }));
  const store = offPathStore(env, config);
  if (!store) return { minutes, routes, top_blocked: [] };
  const p = store.redis.pipeline();
  for (const m of minutes) p.hgetall(metricKeys(config.key_prefix, m).minute);
  for (const m of minutes) p.zrange(metricKeys(config.key_prefix, m).blocked, 0, 19, { rev: true, withScores: true });
  const replies = (await p.exec()) as unknown[];
  minutes.forEach((_, i) => {
    for (const [field, n] of Object.entries(asHash(replies[i]))) {
      const [route, , decision] = field.split("|");
      const r = routes.find((x) => x.route === route);
      if (!r || !decision) continue;
      (ALLOWED.has(decision) ? r.allowed : r.shed)[i]! += Number(n);
    }
  });
  const blocked = new Map<string, number>();
  for (const reply of replies.slice(60)) {
    const flat = (reply ?? []) as Array<string | number>;
    for (let j = 0; j + 1 < flat.length; j += 2) blocked.set(String(flat[j]), (blocked.get(String(flat[j])) ?? 0) + Number(flat[j + 1]));
  }
  const top_blocked = [...blocked.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 10)
    .map(([member, refusals]) => ({ route: member.split("|")[0] ?? "", id: member.split("|")[1] ?? "", refusals }));
  return { minutes, routes, top_blocked };
}
