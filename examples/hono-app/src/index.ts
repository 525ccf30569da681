import { Hono } from "hono";
import { idempotency, rateLimit, type SluiceEnv } from "sluice";

/** The Worker's secrets; sluice reads these two by default (no `redis` option needed). */
type Bindings = {
  UPSTASH_REDIS_REST_URL: string;
  UPSTASH_REDIS_REST_TOKEN: string;
};

const app = new Hono<SluiceEnv & { Bindings: Bindings }>();

// Five reads a minute per client IP (CF-Connecting-IP); the sixth is a 429 problem with
// Retry-After and RateLimit headers, answered before the handler runs.
app.use("/api/*", rateLimit({ name: "api", limits: [{ name: "per-ip", key: "ip", rate: 5, period: "1m" }] }));

app.get("/api/items", (c) => {
  const [perIp] = c.get("sluice").limits;
  return c.json({ items: ["apple", "pear", "plum"], remaining: perIp?.remaining });
});

// An order is created once per Idempotency-Key: a retry of the same request gets the first
// answer again (Idempotent-Replayed: true) instead of a second order.
app.post("/orders", idempotency({ name: "orders", required: true }), async (c) => {
  const { item } = await c.req.json<{ item?: string }>();
  // The fencing token orders this grant among all grants of the key: a store that checks it
  // refuses a write from a holder that lost its claim (sluice's README explains fencing tokens).
  const fence = c.get("sluice").fencingToken;
  return c.json({ id: crypto.randomUUID(), item, fence }, 201);
});

export default app;
