/**
 * sluice's side of the "against @upstash/ratelimit" bench: the same Worker as `anchor.ts` (a Hono
 * app, one token bucket per client IP, 429 when refused), with sluice's `rateLimit` as its only
 * sluice import. Redis comes from the same `UPSTASH_REDIS_REST_URL` / `_TOKEN` secrets.
 */
import { Hono } from "hono";
// As a user imports it: the package's subpath, resolved through its `exports` to the built dist/
// when wrangler bundles it (bench/anchor/build.ts); tsconfig `paths` give the type-checker src/.
import { rateLimit } from "sluice/rate-limit";

/** Refill per second and bucket size: the same numbers as anchor.ts's limit. */
const RATE = 1_000_000;

const app = new Hono();

app.use(
  "*",
  rateLimit({
    key_prefix: "sluice-anchor",
    // as sections 1 and 2: a slow moment on a loaded machine must not turn a decision into `degraded`
    timeout_ms: 1000,
    limits: [{ name: "per-ip", key: "ip", rate: RATE, period: "1s", burst: RATE }],
  }),
);

app.get("*", (c) => c.text("ok"));

export default app;
