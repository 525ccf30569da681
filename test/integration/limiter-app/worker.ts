/**
 * An app of a user's own, as the limiter test runs it in workerd: its own auth middleware puts the
 * user on the context, a limit keyed on it, `limiter()` called from routes and from the queue consumer.
 */
import { Hono } from "hono";
import { limiter, rateLimit, type LimiterResult } from "../../../src/index.js";

interface Bindings {
  UPSTASH_REDIS_REST_URL: string;
  UPSTASH_REDIS_REST_TOKEN: string;
  JOBS: Queue<{ user: string }>;
}

const shared = { key_prefix: "lw", timeout_ms: 10_000 };
const app = new Hono<{ Bindings: Bindings; Variables: { user?: string } }>();

// the app's own auth: a signed-in request names its user
app.use("*", async (c, next) => {
  const user = c.req.header("X-Test-User");
  if (user) c.set("user", user);
  await next();
});
const perUser = { name: "per-user", rate: 2, period: "1h", lease: false } as const;
app.use("/mw/*", rateLimit({ ...shared, limits: [{ ...perUser, key: (c) => c.get("user"), missing: "reject" }] }));
app.get("/mw/x", (c) => c.text("ok"));

const jobs = limiter({ ...shared, name: "jobs", limits: [perUser] });
app.post("/limit/:id", async (c) => c.json(await jobs.limit(c, c.req.param("id"))));
app.get("/peek/:id", async (c) => c.json(await jobs.peek(c, c.req.param("id"))));
app.post("/enqueue/:id", async (c) => {
  await c.env.JOBS.send({ user: c.req.param("id") });
  return c.text("sent", 202);
});

/** What the queue consumer's calls decided, for the test to read. */
const consumed: LimiterResult[] = [];
app.get("/consumed", (c) => c.json(consumed));

export default {
  fetch: app.fetch,
  async queue(batch: MessageBatch<{ user: string }>, env: Bindings, executionCtx: ExecutionContext) {
    for (const m of batch.messages) {
      consumed.push(await jobs.limit({ env, executionCtx }, m.body.user));
      m.ack();
    }
  },
};
