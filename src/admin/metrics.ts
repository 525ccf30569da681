import { Hono } from "hono";
import { minuteOf, prometheus, type MetricsBuffer } from "../metrics/index.js";
import { readTotals } from "../metrics/reads.js";
import { queueLines } from "../metrics/queue.js";
import { backlogRows } from "../features/shedding/queue/depth.js";
import { deferOf, required, type AdminEnv } from "../operator/context.js";
import { PROBLEMS } from "../problem-types.js";

/**
 * `GET /__sluice/metrics`: the decision counts, and the queues' figures and backlogs, in the Prometheus text format. This isolate's
 * counts not yet written are flushed first, so a scrape right after traffic sees it.
 */
export function metricsApp(metrics: MetricsBuffer): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();
  app.get("/", async (c) => {
    const config = c.get("config");
    const stores = c.get("stores");
    await metrics.flush(config, stores, deferOf(c), true);
    const home = required(stores.offPath(), PROBLEMS.metricsUnavailable, "no Redis for the home region");
    const [{ total, minute }, backlogs] = await Promise.all([
      readTotals(home, config.key_prefix, minuteOf(Date.now())),
      backlogRows(home, config, Date.now()),
    ]);
    const text = prometheus(total, minute) + queueLines(total, backlogs).join("\n") + "\n";
    return c.text(text, 200, {
      "content-type": "text/plain; version=0.0.4; charset=utf-8",
    });
  });
  return app;
}
