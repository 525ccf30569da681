import type { Config } from "../config/index.js";
import type { Env } from "../env.js";
import { upstashStore, type Store } from "../store/redis.js";

/** Where the request entered Cloudflare, as `request.cf` tells it. */
export interface Place {
  colo?: string;
  continent?: string;
}

/**
 * The region that decides a request: a region listing the colo wins, then one listing the
 * continent, else the home region.
 *
 * @example chooseRegion(config, { colo: "FRA", continent: "EU" }) // "eu"
 */
export function chooseRegion(config: Pick<Config, "regions" | "home_region">, place: Place | undefined): string {
  const regions = Object.entries(config.regions);
  const colo = place?.colo?.toUpperCase();
  const continent = place?.continent?.toUpperCase();
  const byColo = colo && regions.find(([, r]) => r.colos.includes(colo));
  if (byColo) return byColo[0];
  const byContinent = continent && regions.find(([, r]) => r.continents.includes(continent));
  if (byContinent) return byContinent[0];
  return config.home_region;
}

/** Upstash credentials of a region: its own secrets, else the home region's. */
export function regionCredentials(env: Env, config: Pick<Config, "home_region">, region: string): { url?: string; token?: string } {
  const suffix = region.toUpperCase().replace(/[^A-Z0-9]/g, "_");
  const own = region !== config.home_region && env[`UPSTASH_REDIS_REST_URL_${suffix}`];
  if (own) return { url: own, token: env[`UPSTASH_REDIS_REST_TOKEN_${suffix}`] };
  return { url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN };
}

/** The store of a region, or `undefined` when no Redis is configured for it at all. */
export function regionStore(env: Env, config: Pick<Config, "home_region" | "timeout_ms">, region: string, timeoutMs = config.timeout_ms): Store | undefined {
  const { url, token } = regionCredentials(env, config, region);
  if (!url || !token) return undefined;
  return upstashStore({ name: region, url, token, timeoutMs });
}

/**
 * The home region's store as seen from `region`: with the decision budget at home, with
 * `global_timeout_ms` from anywhere else, where the home Redis is a long way off.
 */
export function homeStore(env: Env, config: Pick<Config, "home_region" | "timeout_ms" | "global_timeout_ms">, region: string): Store | undefined {
  return regionStore(env, config, config.home_region, region === config.home_region ? config.timeout_ms : config.global_timeout_ms);
}

/** Work off the request path (admin, metrics, jobs) can wait longer than a decision. */
export const OFF_PATH_TIMEOUT_MS = 2_000;

/** A region's store (the home region's by default) with the off-path budget. */
export function offPathStore(env: Env, config: Pick<Config, "home_region" | "timeout_ms">, region = config.home_region): Store | undefined {
  return regionStore(env, config, region, OFF_PATH_TIMEOUT_MS);
}

/** Every region of the deployment: the configured ones and the home region, in a stable order. */
export function allRegions(config: Pick<Config, "regions" | "home_region">): string[] {
  return [...new Set([config.home_region, ...Object.keys(config.regions)])].sort();
}
