import { Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import {
  accessLists,
  adminApi,
  ConfigError,
  idempotency,
  limiter,
  rateLimit,
  type LimitOptions,
  type SluiceEnv,
} from "sluice";

/** A queued report: who asked for it. */
type ReportJob = { userId: string };

/** The Worker's bindings (see wrangler.toml). */
type Bindings = {
  // sluice reads these two by default (no `redis` option needed)
  UPSTASH_REDIS_REST_URL: string;
  UPSTASH_REDIS_REST_TOKEN: string;
  // adminApi() answers only a request that bears it; without it, the admin API is off (404)
  SLUICE_ADMIN_TOKEN?: string;
  // "1" turns on the demo's stand-in auth below (tests and `wrangler dev`); never set it in production
  DEMO_AUTH?: string;
  REPORTS: Queue<ReportJob>;
};

/** What the app's own middleware puts on the context, beside sluice's own variables. */
type Variables = { userId?: string };

const app = new Hono<SluiceEnv & { Bindings: Bindings; Variables: Variables }>();

// Stand-in for your real auth: it believes the X-Demo-User header, and only when DEMO_AUTH is "1"
// (a client that names its own user id could take a fresh budget with every request). A real app
// verifies a session cookie or a token (sluice's verifyJwt() can) and sets the user id it proved.
app.use("*", async (c, next) => {
  const user = c.env.DEMO_AUTH === "1" ? c.req.header("X-Demo-User") : undefined;
  if (user) c.set("userId", user);
  await next();
});

// A client on the deny list gets a 403 before anything else runs. accessLists() and the admin API
// below both use the default key_prefix, so they read the same Redis keys: a deny entry put
// through the admin API is enforced here. It takes the name of the rate limit below: one route,
// "api", whose refusals (403s and 429s) the dashboard counts together.
app.use("/api/*", accessLists({ name: "api" }));

// Five reads a minute per client IP (CF-Connecting-IP); the sixth is a 429 problem with
// Retry-After and RateLimit headers, answered before the handler runs.
const apiLimits: LimitOptions[] = [{ name: "per-ip", key: "ip", rate: 5, period: "1m" }];
app.use("/api/*", rateLimit({ name: "api", limits: apiLimits }));

app.get("/api/items", (c) => {
  const [perIp] = c.get("sluice").limits;
  return c.json({ items: ["apple", "pear", "plum"], remaining: perIp?.remaining });
});

// Three profile reads an hour per signed-in user, wherever they come from: the key is a function
// of the context, so it can be anything your own middleware found (its result is hashed before it
// reaches Redis). A request with no user has no key: `missing: "reject"` answers it 400 (the
// default, "ip", would count it per client IP instead).
app.use(
  "/me/*",
  rateLimit({
    name: "me",
    limits: [{ name: "per-user", key: (c) => c.get("userId"), missing: "reject", rate: 3, period: "1h" }],
  }),
);

app.get("/me/profile", (c) => {
  const [perUser] = c.get("sluice").limits;
  return c.json({ user: c.get("userId"), remaining: perUser?.remaining });
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

// Reports are costly: five an hour per user, whether made at once or queued. limiter() is called
// from the app's own code, with an identifier only the handler knows. `lease: false` has every
// call decided in Redis, so the quota route sees each report at once; leases trade that for fewer
// round trips (sluice's docs/regions-and-leases.md).
const reports = limiter({ name: "reports", limits: [{ name: "per-user", rate: 5, period: "1h", lease: false }] });

app.post("/reports", async (c) => {
  const userId = c.get("userId");
  if (!userId) return c.json({ error: "sign in first" }, 401);
  const { success, remaining, retryAfterMs } = await reports.limit(c, userId);
  if (!success) {
    // the app answers the refusal its own way; retryAfterMs is -1 only for a cost above the capacity
    c.header("Retry-After", String(Math.ceil(Math.max(retryAfterMs, 0) / 1000)));
    return c.json({ error: "too many reports", retryAfterMs }, 429);
  }
  return c.json({ report: `report for ${userId}`, remaining }, 201);
});

// What is left of the user's reports, spending nothing.
app.get("/reports/quota", async (c) => {
  const userId = c.get("userId");
  if (!userId) return c.json({ error: "sign in first" }, 401);
  const { remaining, limit, reset } = await reports.peek(c, userId);
  return c.json({ remaining, limit, reset });
});

// Queued reports are made by queue() below, which spends from the same budget.
app.post("/reports/queued", async (c) => {
  const userId = c.get("userId");
  if (!userId) return c.json({ error: "sign in first" }, 401);
  await c.env.REPORTS.send({ userId });
  return c.json({ queued: true }, 202);
});

// The admin API and dashboard at /__sluice/ (mounted at the root: its pages link there; sign in
// with SLUICE_ADMIN_TOKEN). GET /__sluice/health is open; the rest needs `Authorization: Bearer
// <SLUICE_ADMIN_TOKEN>` or the dashboard's session. It shows and manages the routes the middleware
// above serve, by the names they were given ("api", "me", "orders", "reports"), under the same
// (default) key_prefix: no list of routes to keep in step with them.
app.route("/", adminApi());

// sluice's own answers (a 503 problem with Retry-After when Redis is down and the deployment fails
// closed) are HTTPExceptions: passed on as they are. limiter() throws a ConfigError when the Worker
// has no Redis configured (it names the missing secret): a misconfiguration, answered as one.
app.onError((err, c) => {
  if (err instanceof HTTPException) return err.getResponse();
  if (err instanceof ConfigError) return c.json({ error: "misconfigured", field: err.field, detail: err.problem }, 500);
  return c.json({ error: "internal error" }, 500);
});

/** The queue consumer: a request has no part in it, so limiter() takes the Worker's env and context. */
async function queue(batch: MessageBatch<ReportJob>, env: Bindings, ctx: ExecutionContext): Promise<void> {
  for (const message of batch.messages) {
    const { success, retryAfterMs } = await reports.limit({ env, executionCtx: ctx }, message.body.userId);
    if (success) {
      // ...make the report here...
      message.ack();
    } else {
      // over the user's budget: sent again for when a report is free, and this copy acked. Not
      // message.retry(): each retry counts towards the consumer's max_retries (3 by default), so a
      // report waiting its turn would be dropped after three deferrals
      await env.REPORTS.send(message.body, { delaySeconds: Math.max(1, Math.ceil(retryAfterMs / 1000)) });
      message.ack();
    }
  }
}

// A Worker with a queue consumer exports both handlers (an app with routes only may export `app`).
export default { fetch: app.fetch, queue } satisfies ExportedHandler<Bindings, ReportJob>;
