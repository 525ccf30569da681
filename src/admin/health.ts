import { Hono } from "hono";
import type { Config } from "../config/index.js";
import { allRegions, type Stores } from "../region/index.js";
import type { AdminEnv } from "../operator/context.js";

/** One region's Redis as health reports it: reachable or not, and how long its PING took. */
interface RegionHealth {
  region: string;
  reachable: boolean;
  rtt_ms?: number;
  error?: string;
}

/**
 * `GET /__sluice/health`: without a valid credential `{ "status": "up" }` (no Redis call, for load
 * balancers); with the token or a dashboard session, each region's Redis with one PING each
 * (no URLs or secrets), `503` when one is unreachable.
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

/** Each region's Redis, one PING each (in parallel). */
export function regionsHealth(config: Config, stores: Stores): Promise<RegionHealth[]> {
  return Promise.all(allRegions(config).map((name) => ping(stores, name)));
}

async function ping(stores: Stores, region: string): Promise<RegionHealth> {
  const store = stores.offPath(region);
  if (!store) return { region, reachable: false, error: "no Redis configured" };
  const started = Date.now();
  try {
    await store.ping();
    return { region, reachable: true, rtt_ms: Date.now() - started };
  } catch {
    return { region, reachable: false, rtt_ms: Date.now() - started };
  }
}
