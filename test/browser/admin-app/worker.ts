/**
 * An app of a user's own with the admin API mounted in it, as the docs' "admin API in your app"
 * snippet writes it: `accessLists()` and `rateLimit()` under one name, a second route whose limit
 * is keyed on `global`, and `adminApi()` given only the shared options (its routes are the
 * middleware's). Built with esbuild and run in workerd by test/browser/admin-app.test.ts.
 */
import { Hono } from "hono";
import { accessLists, adminApi, defineLimits, rateLimit, type SluiceEnv } from "../../../src/index.js";

const shared = { key_prefix: "aa", timeout_ms: 2_000 };
const api = { ...shared, name: "api" };
const limits = defineLimits([{ name: "per-ip", key: "ip", rate: 3, period: "1h", lease: false }]);

const app = new Hono<SluiceEnv>();
app.use("/api/*", accessLists(api), rateLimit({ ...api, limits }));
app.get("/api/items", (c) => c.json({ items: ["apple", "pear"] }));
app.use(
  "/search",
  rateLimit({
    ...shared,
    name: "search",
    limits: [{ name: "site", key: "global", rate: 3, period: "1h", lease: false }],
  }),
);
app.get("/search", (c) => c.json({ results: [] }));
app.route("/", adminApi(shared));

export default app;
