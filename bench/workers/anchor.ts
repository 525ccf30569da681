/**
 * The anchor of the "against @upstash/ratelimit" bench: the Worker a user writes with
 * `@upstash/ratelimit` (a Hono app, one token bucket per client IP, 429 when refused). Its twin
 * `sluice.ts` has the same shape and the same limit; `bench/anchor/` builds, runs and compares both.
 */
import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis/cloudflare";
import { Hono } from "hono";

interface Env {
  UPSTASH_REDIS_REST_URL: string;
  UPSTASH_REDIS_REST_TOKEN: string;
}

/** Refill per second and bucket size: the same numbers as sluice.ts's limit. */
const RATE = 1_000_000;

let limiter: Ratelimit | undefined;

const app = new Hono<{ Bindings: Env }>();

app.use("*", async (c, next) => {
  // one client per isolate, made on the first request (env is only known then), as the docs do
  limiter ??= new Ratelimit({
    redis: Redis.fromEnv(c.env),
    limiter: Ratelimit.tokenBucket(RATE, "1 s", RATE),
    prefix: "anchor",
  });
  const { success, pending } = await limiter.limit(c.req.header("CF-Connecting-IP") ?? "unknown");
  c.executionCtx.waitUntil(pending);
  if (!success) return c.text("Too Many Requests", 429);
  await next();
});

app.get("*", (c) => c.text("ok"));

export default app;
