import type { Env } from "../env.js";
import { loadConfig, type ConfigResult } from "./index.js";

/**
 * The configuration of an environment, validated once and kept while the environment's values
 * stay the same: the request path never re-parses `SLUICE`.
 */
export class ConfigCache {
  private memo: { sluice: unknown; origin: unknown; queue: boolean; result: ConfigResult } | undefined;

  of(env: Env): ConfigResult {
    const queue = Boolean(env.SLUICE_QUEUE);
    const m = this.memo;
    if (m && m.sluice === env.SLUICE && m.origin === env.ORIGIN_URL && m.queue === queue) return m.result;
    const secrets = env as unknown as Record<string, unknown>;
    const result = loadConfig({
      ORIGIN_URL: env.ORIGIN_URL,
      SLUICE: env.SLUICE,
      hasQueue: queue,
      hasSecret: (name) => typeof secrets[name] === "string" && secrets[name] !== "",
    });
    this.memo = { sluice: env.SLUICE, origin: env.ORIGIN_URL, queue, result };
    return result;
  }
}
