// A Worker whose only sluice import is rateLimit (bench/weight.ts measures it, test/package/weight.test.ts checks what it carries).
import { Hono } from "hono";
import { rateLimit } from "../../src/middleware/rate-limit.js";

const app = new Hono();
app.use("*", rateLimit({ limits: [{ name: "per-ip", key: "ip", rate: 10, period: "1s" }] }));
app.get("*", (c) => c.text("ok"));
export default app;
