import { createApp } from "../src/gateway/app.js";
import { Runtime } from "../src/runtime.js";
import type { Env } from "../src/env.js";
import { onSchedule } from "../src/gateway/scheduled.js";
import { onQueue } from "../src/features/shedding/queue/deliver.js";
import type { JobMessage } from "../src/features/shedding/queue/queue.js";

// Wiring only: requests go to the Hono app, cron triggers to the scheduled work, queue batches
// to the consumer that delivers shed requests.
// One runtime per isolate: the state every request of this isolate shares (src/runtime.ts).
const runtime = new Runtime();
const app = createApp(runtime);

export default {
  fetch: app.fetch,
  scheduled(_event, env, ctx) {
    ctx.waitUntil(onSchedule(env, runtime));
  },
  queue(batch, env, ctx) {
    return onQueue(batch, env, (work) => ctx.waitUntil(work), runtime);
  },
} satisfies ExportedHandler<Env, JobMessage>;
