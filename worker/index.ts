import { createApp } from "../src/app.js";
import type { Env } from "../src/env.js";
import { onSchedule } from "../src/scheduled.js";
import { onQueue } from "../src/shed/deliver.js";
import type { JobMessage } from "../src/shed/queue.js";

// Wiring only: requests go to the Hono app, cron triggers to the scheduled work, queue batches
// to the consumer that delivers shed requests.
const app = createApp();

export default {
  fetch: app.fetch,
  scheduled(_event, env, ctx) {
    ctx.waitUntil(onSchedule(env));
  },
  queue(batch, env, ctx) {
    return onQueue(batch, env, (work) => ctx.waitUntil(work));
  },
} satisfies ExportedHandler<Env, JobMessage>;
