import type { Context, MiddlewareHandler } from "hono";
import {
  loadConfigWith,
  ConfigError,
  OPTIONS_SOURCE,
  type Config,
  type ConfigSchema,
  type RouteCheck,
} from "../config/load.js";
import type { SluiceInput } from "../config/schema.js";
import type { SluiceEnv } from "../context.js";
import type { Env } from "../env.js";
import { answerOwnProblems } from "../pipeline/error-answer.js";
import { mount } from "../pipeline/mount.js";
import { entered, newScope, type ScopeSource } from "../pipeline/scope.js";
import { envConnections, type Connect } from "../region/index.js";
import { withoutOverride } from "../routing/method.js";
import { isolateRuntime, type Runtime } from "../runtime.js";
import type { RedisConnection } from "../store/redis.js";
import { ServedRoutes, type Duty } from "../operator/served.js";
import type { Step } from "./step.js";

/** Settings every sluice middleware shares: where Redis is, and the deployment's global settings. */
export interface SharedOptions extends Pick<
  SluiceInput,
  | "key_prefix"
  | "timeout_ms"
  | "max_timeout_ms"
  | "on_store_error"
  | "home_region"
  | "regions"
  | "jwt"
  | "paths"
  | "problem_base"
  | "labels"
> {
  /**
   * The Redis: an `@upstash/redis` client (or `{ url, token }`), or a function of the request's
   * context giving one. Default: the Worker's `UPSTASH_REDIS_REST_URL` / `_TOKEN` (and
   * `UPSTASH_REDIS_REST_URL_<REGION>` / `_TOKEN_<REGION>` for other regions).
   */
  redis?: RedisConnection | ((c: Context) => RedisConnection);
  /** The isolate state to keep; default: one per isolate, shared by every sluice middleware. */
  runtime?: Runtime;
}

/** The options every middleware takes besides its own table (see `SharedOptions`). */
export const SHARED_FIELDS = [
  "key_prefix",
  "timeout_ms",
  "max_timeout_ms",
  "on_store_error",
  "home_region",
  "regions",
  "jwt",
  "paths",
  "problem_base",
  "labels",
] as const;

/** How a middleware's options are checked: its configuration schema, and the route table its options spell at their top level. */
export interface OptionsSchema {
  /** `[vars.SLUICE]`'s schema with this middleware's route table only (src/config/settings.ts), built on first use. */
  schema: () => ConfigSchema;
  /** The route's table the options are (idempotency, session, breaker), if any. */
  table?: string;
  /** The capability's checks of the route that need more than its schema (`RouteCheck`, src/config/load.ts). */
  checks?: readonly RouteCheck[];
}

/**
 * Validates a middleware's options with the schemas `wrangler.toml` is validated with, as one
 * route of a configuration. A bad option throws a `ConfigError` at construction, naming the field
 * as the options spell it, with the names of the limits on the way (`limits[0] ("per-ip").rate: ...`).
 *
 * @example compileOptions("rateLimit", options, { name: "api", limits: [{ name: "per-ip", rate: 10, period: "1s" }] }, { schema: plainConfigSchema })
 */
export function compileOptions(
  middleware: string,
  options: SharedOptions,
  route: Record<string, unknown>,
  { schema, table, checks }: OptionsSchema,
): Config {
  checkRedisOption(middleware, options.redis);
  const shared = Object.fromEntries(SHARED_FIELDS.flatMap((f) => (options[f] === undefined ? [] : [[f, options[f]]])));
  const SLUICE = { ...shared, routes: [{ match: "/*", ...route }] };
  const loaded = loadConfigWith(schema(), { SLUICE }, OPTIONS_SOURCE, checks);
  if (loaded.ok) return loaded.config;
  // the options spell a route's table (idempotency, session, breaker) at their top level
  const inTable = table ? new RegExp(`^${table}\\.?`) : /^$/;
  throw loaded.error.respelled((name) => {
    const field = name
      .replace(/^SLUICE\.routes\[0\](?: \("(?:[^"\\]|\\.)*"\))?\.?/, "")
      .replace(/^SLUICE\.?/, "")
      .replace(inTable, "");
    return `${middleware}(): ${field || "options"}`;
  });
}

/**
 * A `redis: { url, token }` option is checked when the middleware is made: a URL that is not
 * http(s) would otherwise fail on every request, as a store error the outage policy hides.
 */
function checkRedisOption(middleware: string, redis: SharedOptions["redis"]): void {
  if (redis === undefined || typeof redis === "function") return;
  if (!("url" in redis) && !("token" in redis)) return; // an @upstash/redis client: it checked its own
  const { url, token } = redis as { url?: unknown; token?: unknown };
  if (typeof url !== "string" || !/^https?:\/\/[^/\s]+/i.test(url) || !parses(url))
    throw new ConfigError(`${middleware}(): redis.url`, `${JSON.stringify(url)} is not an https:// (or http://) URL`);
  if (typeof token !== "string" || token === "")
    throw new ConfigError(`${middleware}(): redis.token`, "must be the database's REST token (a non-empty string)");
}

/** Whether `url` is a URL the runtime can parse. */
function parses(url: string): boolean {
  try {
    new URL(url);
    return true;
  } catch {
    return false;
  }
}

/** A middleware's own table, its optional fields left out so the schema's defaults apply. */
export function tableFields(fields: Record<string, unknown>): Record<string, unknown> {
  const shared = new Set<string>(["redis", "runtime", ...SHARED_FIELDS]);
  return Object.fromEntries(Object.entries(fields).filter(([k, v]) => v !== undefined && !shared.has(k)));
}

/**
 * How a middleware (or `limiter()`) reaches Redis: what it was given, a connection or a function
 * of the call's context giving one, else the Worker's secrets in the context's `env`.
 */
export function connectionOf<C extends { env?: unknown }>(
  options: { redis?: RedisConnection | ((c: C) => RedisConnection) },
  c: C,
  config: Config,
): Connect {
  const given = options.redis;
  if (given === undefined) return envConnections((c.env ?? {}) as Env, config.home_region);
  const connection = typeof given === "function" ? given(c) : given;
  return () => connection;
}

/** Who a middleware is, as the admin API names it, and what it does for its routes (src/operator/served.ts). */
export interface Serves {
  by: string;
  duties: readonly Duty[];
}

/**
 * A step (or steps, in order) as a middleware of its own, for an app of the user's: the pipeline's
 * one mount (src/pipeline/mount.ts), its scope made per request from its options, and what it
 * decides stamped on the response (`Sluice-Decision`, `Sluice-Region`, unless a sluice middleware
 * nearer the handler stamped it already). A refusal is answered with its problem; the app's own
 * exceptions go on to the app's error handler. Its routes are recorded as served (`serves`), so
 * `adminApi()` in the same app shows and manages them under the names the middleware gave.
 */
export function standalone(
  config: Config,
  options: SharedOptions,
  steps: Step[],
  serves: Serves,
  gateway = { matchRoutes: false },
): MiddlewareHandler<SluiceEnv> {
  recordServed(config, options, serves);
  return mount(
    { scope: optionsScope(config, options, gateway.matchRoutes), answer: answerOwnProblems, nested: true },
    steps,
  );
}

/**
 * Records, in the isolate's runtime, that a middleware made now serves `routes` (default all of
 * its configuration's) under its `key_prefix`: what `adminApi()` in the same app reads.
 */
export function recordServed(config: Config, options: SharedOptions, serves: Serves, routes = config.routes): void {
  const served = (options.runtime ?? isolateRuntime()).own(ServedRoutes);
  for (const route of routes) served.serve(config.key_prefix, route, serves.by, serves.duties);
}

/** The scope of a request in an app: from the middleware's options; `sluice(config)` matches its routes. */
function optionsScope(config: Config, options: SharedOptions, matchRoutes: boolean): ScopeSource {
  return (c) => {
    const runtime = options.runtime ?? isolateRuntime();
    const env = (c.env ?? {}) as Env;
    const scope = entered(
      newScope(c, { runtime, config, connect: connectionOf(options, c, config), env }, matchRoutes),
    );
    // sluice(config)'s routes decide on one method: the app's handlers see no override they did not honour
    if (matchRoutes && !scope.target && !scope.methodOverridden) c.req.raw = withoutOverride(c.req.raw);
    const claims = c.get("jwtPayload" as never) as unknown;
    if (claims && typeof claims === "object") scope.facts.claims = claims as Record<string, unknown>;
    scope.facts.context = c;
    return scope;
  };
}
