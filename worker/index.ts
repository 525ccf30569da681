import { createApp } from "../src/app.js";
import type { Env } from "../src/env.js";
import { onSchedule } from "../src/scheduled.js";

// Wiring only: requests go to the Hono app, cron triggers to the scheduled work.
const app = createApp();

export default {
  fetch: app.fetch,
  scheduled(_event, env, ctx) {
    ctx.waitUntil(onSchedule(env));
  },
} satisfies ExportedHandler<Env>;
