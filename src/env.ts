/** The Worker's bindings: vars from wrangler.toml, secrets from `.dev.vars` / `wrangler secret put`. */
export interface Env {
  ORIGIN_URL?: string;
  SLUICE?: unknown;
  UPSTASH_REDIS_REST_URL?: string;
  UPSTASH_REDIS_REST_TOKEN?: string;
  SLUICE_ADMIN_TOKEN?: string;
  /** `UPSTASH_REDIS_REST_URL_<REGION>` / `UPSTASH_REDIS_REST_TOKEN_<REGION>` for each other region. */
  [secret: `UPSTASH_REDIS_REST_${string}`]: string | undefined;
}
