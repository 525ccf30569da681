import { Hono, type Context } from "hono";
import { peekBucket } from "./decision/decision.js";
import { requireServed, type AdminEnv } from "../../operator/context.js";
import { bucketAddress, type BucketAddress } from "./admin-identity.js";

/**
 * `/__sluice/buckets/{route}/{limit}?ip=…`, the client named by its key parts as query
 * parameters and `region=` (default home): `GET` reads the bucket without spending (`remaining`,
 * `would_allow`, `retry_after_ms`, `reset_ms`), `DELETE` resets it.
 */
export function bucketsApp(): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();

  app.get("/:route/:limit", async (c) => {
    const a = await addressOf(c);
    const o = await peekBucket({ limit: a.limit, key: a.key, store: a.store });
    return c.json({
      route: a.route.name,
      limit: a.limit.name,
      region: a.region,
      key: a.key,
      remaining: o.remaining,
      would_allow: o.allowed,
      retry_after_ms: o.retryAfterMs,
      reset_ms: o.resetMs,
    });
  });

  app.delete("/:route/:limit", async (c) => {
    const a = await addressOf(c);
    await a.store.keys.del(a.key);
    return c.json({
      reset: a.key,
      note: "isolates that cached this bucket as closed keep refusing until its retry time",
    });
  });

  return app;
}

/** The bucket the path names, of a route and limit a middleware of the app decides (none would be a bucket nobody uses). */
function addressOf(c: Context<AdminEnv, "/:route/:limit">): Promise<BucketAddress> {
  requireServed(c, c.req.param("route"), "limits", c.req.param("limit"));
  return bucketAddress(
    c.get("config"),
    c.get("stores"),
    c.req.param("route"),
    c.req.param("limit"),
    new URL(c.req.url).searchParams,
  );
}
