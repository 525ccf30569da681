// A Worker whose only sluice import is rateLimit: test/package/weight.test.ts checks what it carries (section 12 of the bench weighs bench/workers/sluice.ts).
import { Hono } from "hono";
import { rateLimit } from "../../src/middleware/rate-limit.js";

const app = new Hono();
app.use("*", rateLimit({ limits: [{ name: "per-ip", key: "ip", rate: 10, period: "1s" }] }));
app.get("*", (c) => c.text("ok"));
export default app;
