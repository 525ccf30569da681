import type { Env } from "../env.js";
import { loadConfig, type ConfigResult } from "./index.js";
import { logFailure } from "../util/log.js";

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
    // once per isolate and configuration, in the Worker's logs (`wrangler tail`): not on the request path
    if (result.ok) for (const w of result.warnings) logFailure("config_warning", { ...w });
    return result;
  }
}
