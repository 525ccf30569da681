import type { Env } from "../env.js";
import { loadConfig, type ConfigError, type ConfigResult } from "./index.js";
import { Problem } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";
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
    else logFailure("config_invalid", { field: result.error.field, problem: result.error.problem });
    return result;
  }
}

/**
 * The answer to every request while the configuration is invalid: a `500` problem. Which field and
 * what is wrong are the operator's (the log, once per isolate; `npm run check`; the admin API with
 * the token), never any client's: `operator` says the request carried the admin token.
 *
 * @example throw invalidConfiguration(loaded.error, false) // 500, detail without the field
 */
export function invalidConfiguration(error: ConfigError, operator: boolean, headers?: Record<string, string>): Problem {
  if (operator)
    return new Problem({
      type: PROBLEMS.invalidConfiguration,
      detail: error.message,
      extensions: { field: error.field, problem: error.problem },
      headers,
    });
  return new Problem({
    type: PROBLEMS.invalidConfiguration,
    detail: "sluice's configuration is invalid: the operator's log names the field (and the admin API, with its token)",
    headers,
  });
}
