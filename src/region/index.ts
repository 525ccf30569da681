import type { Config } from "../config/index.js";
import type { Env } from "../env.js";
import { upstashStore, type BudgetBounds, type Store } from "../store/redis.js";

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

/** The names of a region's own Upstash secrets (`UPSTASH_REDIS_REST_URL_EU`, ...). */
export function regionSecretNames(region: string): { url: `UPSTASH_REDIS_REST_URL_${string}`; token: `UPSTASH_REDIS_REST_TOKEN_${string}` } {
  const suffix = region.toUpperCase().replace(/[^A-Z0-9]/g, "_");
  return { url: `UPSTASH_REDIS_REST_URL_${suffix}`, token: `UPSTASH_REDIS_REST_TOKEN_${suffix}` };
}

/** Upstash credentials of a region: its own secrets, else the home region's. */
export function regionCredentials(env: Env, config: Pick<Config, "home_region">, region: string): { url?: string; token?: string } {
  const names = regionSecretNames(region);
  const own = region !== config.home_region && env[names.url];
  if (own) return { url: own, token: env[names.token] };
  return { url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN };
}

/** When `max_timeout_ms` is not set: a second covers a store across an ocean, cold connection included. */
export const DEFAULT_MAX_TIMEOUT_MS = 1_000;

/**
 * The bounds of a decision's Redis budget: `timeout_ms` is the floor, `max_timeout_ms` the
 * ceiling (by default a second, or `timeout_ms` when that is longer). Between them the budget
 * follows each store's round trip as this isolate measures it.
 */
export function decisionBudget(config: Pick<Config, "timeout_ms" | "max_timeout_ms">): BudgetBounds {
  return { floorMs: config.timeout_ms, ceilingMs: config.max_timeout_ms ?? Math.max(DEFAULT_MAX_TIMEOUT_MS, config.timeout_ms) };
}

/**
 * The store of a region, or `undefined` when no Redis is configured for it at all: with the
 * adaptive decision budget, or with `fixedMs` for work off the request path.
 */
export function regionStore(env: Env, config: Pick<Config, "home_region" | "timeout_ms" | "max_timeout_ms">, region: string, fixedMs?: number): Store | undefined {
  const { url, token } = regionCredentials(env, config, region);
  if (!url || !token) return undefined;
  return upstashStore({ name: region, url, token, budget: fixedMs ?? decisionBudget(config) });
}

/**
 * The home region's store, with the decision budget. From a far region the home Redis is an
 * ocean away; the budget follows the round trip this isolate sees, so it needs no budget of its
 * own (`global_timeout_ms` did that once and is ignored now), and `_from`, the deciding region,
 * no longer changes anything.
 */
export function homeStore(env: Env, config: Pick<Config, "home_region" | "timeout_ms" | "max_timeout_ms">, _from: string): Store | undefined {
  return regionStore(env, config, config.home_region);
}

/** Work off the request path (admin, metrics, jobs) can wait longer than a decision. */
export const OFF_PATH_TIMEOUT_MS = 2_000;

/** A region's store (the home region's by default) with the off-path budget. */
export function offPathStore(env: Env, config: Pick<Config, "home_region" | "timeout_ms" | "max_timeout_ms">, region = config.home_region): Store | undefined {
  return regionStore(env, config, region, OFF_PATH_TIMEOUT_MS);
}

/** Every region of the deployment: the configured ones and the home region, in a stable order. */
export function allRegions(config: Pick<Config, "regions" | "home_region">): string[] {
  return [...new Set([config.home_region, ...Object.keys(config.regions)])].sort();
}
