/** The Worker's bindings: vars from wrangler.toml, secrets from `.dev.vars` / `wrangler secret put`. */
export interface Env {
  ORIGIN_URL?: string;
  SLUICE?: unknown;
  UPSTASH_REDIS_REST_URL?: string;
  UPSTASH_REDIS_REST_TOKEN?: string;
  SLUICE_ADMIN_TOKEN?: string;
  /** The key of the ids shown for clients (ledger, logs, dashboard); `SLUICE_ADMIN_TOKEN` without it (src/identity/pseudonym.ts). */
  SLUICE_ID_KEY?: string;
  /**
   * Producer binding of the queue that `on_limit = "queue"` routes shed into (consumed by this
   * Worker). Its messages are the shedding queue's `JobMessage` (src/features/shedding/queue/),
   * typed where they are made and read: the bindings stand below every capability.
   */
  SLUICE_QUEUE?: Queue<unknown>;
  /** Optional producer binding of the dead-letter queue for jobs that kept failing at the origin. */
  SLUICE_DLQ?: Queue<unknown>;
  /** `UPSTASH_REDIS_REST_URL_<REGION>` / `UPSTASH_REDIS_REST_TOKEN_<REGION>` for each other region. */
  [secret: `UPSTASH_REDIS_REST_${string}`]: string | undefined;
}
