import type { Config } from "../config/index.js";
import type { Env } from "../env.js";
import type { BudgetBounds, RedisConnection, Store, StoreRegistry } from "../store/redis.js";

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
export function regionSecretNames(region: string): {
  url: `UPSTASH_REDIS_REST_URL_${string}`;
  token: `UPSTASH_REDIS_REST_TOKEN_${string}`;
} {
  const suffix = region.toUpperCase().replace(/[^A-Z0-9]/g, "_");
  return { url: `UPSTASH_REDIS_REST_URL_${suffix}`, token: `UPSTASH_REDIS_REST_TOKEN_${suffix}` };
}

/** How a deployment reaches each region's Redis (undefined: none configured for it). */
export type Connect = (region: string) => RedisConnection | undefined;

/**
 * The Worker's Upstash secrets: a region's own (`UPSTASH_REDIS_REST_URL_EU`, ...), else the
 * home region's (`UPSTASH_REDIS_REST_URL` / `_TOKEN`).
 */
export function envConnections(env: Env, homeRegion: string): Connect {
  return (region) => {
    const regional = regionSecretNames(region);
    const own = region !== homeRegion && env[regional.url];
    const url = own ? own : env.UPSTASH_REDIS_REST_URL;
    const token = own ? env[regional.token] : env.UPSTASH_REDIS_REST_TOKEN;
    // the variables a misconfigured store's errors name (a token refused, a URL that is not REST)
    const names = own ? regional : HOME_SECRETS;
    return url && token ? { url, token, names } : undefined;
  };
}

/** The home region's Upstash secrets, which every region without its own uses. */
const HOME_SECRETS = { url: "UPSTASH_REDIS_REST_URL", token: "UPSTASH_REDIS_REST_TOKEN" } as const;

/**
 * The Upstash secret a region lacks, as `envConnections` reads them: the region's own token when
 * it has its own URL, else the home region's URL or token. Undefined: the region is configured.
 *
 * @example missingRedisVariable({}, "eu", "eu") // "UPSTASH_REDIS_REST_URL"
 */
export function missingRedisVariable(env: Env, region: string, homeRegion: string): string | undefined {
  const names = regionSecretNames(region);
  if (region !== homeRegion && env[names.url]) return env[names.token] ? undefined : names.token;
  if (!env.UPSTASH_REDIS_REST_URL) return "UPSTASH_REDIS_REST_URL";
  return env.UPSTASH_REDIS_REST_TOKEN ? undefined : "UPSTASH_REDIS_REST_TOKEN";
}

/** When `max_timeout_ms` is not set: a second covers a store across an ocean, cold connection included. */
export const DEFAULT_MAX_TIMEOUT_MS = 1_000;

/**
 * The bounds of a decision's Redis budget: `timeout_ms` is the floor, `max_timeout_ms` the
 * ceiling (by default a second, or `timeout_ms` when that is longer). Between them the budget
 * follows each store's round trip as this isolate measures it.
 */
export function decisionBudget(config: Pick<Config, "timeout_ms" | "max_timeout_ms">): BudgetBounds {
  return {
    floorMs: config.timeout_ms,
    ceilingMs: config.max_timeout_ms ?? Math.max(DEFAULT_MAX_TIMEOUT_MS, config.timeout_ms),
  };
}

/** Work off the request path (admin, metrics, jobs) can wait longer than a decision. */
export const OFF_PATH_TIMEOUT_MS = 2_000;
/** Settling an idempotency record stores up to a MiB: it gets more than a decision's budget. */
export const SETTLE_TIMEOUT_MS = 5_000;

type Budgets = Pick<Config, "home_region" | "timeout_ms" | "max_timeout_ms">;

/**
 * The Redis databases of one deployment, by region and budget. A store is `undefined` when no
 * Redis is configured for its region at all.
 *
 * @example
 * const stores = new Stores(runtime.registry, envConnections(env, config.home_region), config);
 * const store = stores.decision("eu"); // adaptive budget, between timeout_ms and max_timeout_ms
 */
export class Stores {
  constructor(
    private readonly registry: StoreRegistry,
    private readonly connect: Connect,
    private readonly config: Budgets,
  ) {}

  /** A region's store with the decision budget, which follows the round trip this isolate sees. */
  decision(region: string): Store | undefined {
    return this.open(region, decisionBudget(this.config));
  }

  /**
   * The home region's store, with the decision budget: from a far region the home Redis is an
   * ocean away, and the adaptive budget follows that round trip without a budget of its own.
   */
  home(): Store | undefined {
    return this.decision(this.config.home_region);
  }

  /** A region's store (the home region's by default) with a fixed budget, for work off the request path. */
  fixed(ms: number, region = this.config.home_region): Store | undefined {
    return this.open(region, ms);
  }

  /** A region's store (the home region's by default) with the off-path budget. */
  offPath(region = this.config.home_region): Store | undefined {
    return this.fixed(OFF_PATH_TIMEOUT_MS, region);
  }

  private open(region: string, budget: BudgetBounds | number): Store | undefined {
    const connection = this.connect(region);
    return connection ? this.registry.store({ name: region, connection, budget }) : undefined;
  }
}

/** Every region of the deployment: the configured ones and the home region, in a stable order. */
export function allRegions(config: Pick<Config, "regions" | "home_region">): string[] {
  return [...new Set([config.home_region, ...Object.keys(config.regions)])].sort();
}

/** Every distinct Redis of the deployment (regions without secrets of their own share the home one), off-path budget. */
export function everyStore(config: Pick<Config, "regions" | "home_region">, stores: Stores): Store[] {
  const seen = new Map<string, Store>();
  for (const r of allRegions(config)) {
    const s = stores.offPath(r);
    if (s && !seen.has(s.id)) seen.set(s.id, s);
  }
  return [...seen.values()];
}
