import { Hono } from "hono";
import clockLua from "../../lua/clock.lua";
import type { Config } from "../config/index.js";
import { allRegions, type Stores } from "../region/index.js";
import type { AdminEnv } from "../operator/context.js";
import { storeClock } from "../store/clock-probe.js";
import { versionKey } from "../store/layout.js";
import { isMisconfigured } from "../store/deadline.js";
import type { ClockReport, Store } from "../store/redis.js";
import { orElse } from "../util/log.js";

/**
 * One region's Redis as health reports it: reachable or not, how long its PING took, and where its
 * scripts take their clock from (`clock.mode`: "redis", or "isolate" where it refuses TIME in
 * scripts, with since when, the refusal, and when TIME is tried again; src/store/clock.ts).
 */
interface RegionHealth {
  region: string;
  reachable: boolean;
  rtt_ms?: number;
  error?: string;
  /** The setting to fix when the store is misconfigured (a token refused, a URL that is not REST). */
  misconfigured?: string;
  clock?: ClockReport;
}

/**
 * `GET /__sluice/health`: without a valid credential `{ "status": "up" }` (no Redis call, for load
 * balancers); with the token or a dashboard session, each region's Redis with one PING each
 * (no URLs or secrets) and its clock, `503` when one is unreachable; a misconfigured one (its
 * token refused, its URL not REST) says so, naming the variable.
 */
export function healthApp(): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();
  app.get("/", async (c) => {
    if (!c.get("authorised")) return c.json({ status: "up" });
    const regions = await regionsHealth(c.get("config"), c.get("stores"));
    const ok = regions.every((r) => r.reachable);
    return c.json({ ok, regions }, ok ? 200 : 503);
  });
  return app;
}

/** Each region's Redis, one PING each (in parallel), and its clock. */
export function regionsHealth(config: Config, stores: Stores): Promise<RegionHealth[]> {
  return Promise.all(allRegions(config).map((name) => ping(config, stores, name)));
}

async function ping(config: Config, stores: Stores, region: string): Promise<RegionHealth> {
  const store = stores.offPath(region);
  if (!store) return { region, reachable: false, error: "no Redis configured" };
  const started = Date.now();
  try {
    await store.ping();
    const rtt_ms = Date.now() - started;
    return { region, reachable: true, rtt_ms, clock: await clockOf(config, store, region) };
  } catch (e) {
    // the deployment's mistake is said, naming the setting (the message carries no secret); an
    // outage's text may name hosts, so it stays in the log
    if (isMisconfigured(e)) return { region, reachable: false, error: e.message, misconfigured: e.variable };
    return { region, reachable: false, rtt_ms: Date.now() - started };
  }
}

/** The store's clock as this isolate knows it; one run of lua/clock.lua when it knows nothing yet. */
function clockOf(config: Config, store: Store, region: string): Promise<ClockReport> {
  return orElse(storeClock(store, clockLua, versionKey(config.key_prefix)), store.clock(), "health_clock_failed", {
    region,
  });
}
