import type { Context, MiddlewareHandler, Next } from "hono";
import { loadConfig, ConfigError, type Config } from "../config/index.js";
import type { SluiceInput } from "../config/schema.js";
import { publicDecision, type Scope, type SluiceEnv } from "../context.js";
import type { Env } from "../env.js";
import { forwardTarget, newScope, ScopedProblem } from "../gateway/scope.js";
import { Problem } from "../problem.js";
import { envConnections, type Connect } from "../region/index.js";
import { withoutOverride } from "../routing/method.js";
import { isolateRuntime, type Runtime } from "../runtime.js";
import type { RedisConnection } from "../store/redis.js";
import { countsAsDecision, decisionOf, record, stamp } from "./decision/index.js";
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

/**
 * Validates a middleware's options with the schemas `wrangler.toml` is validated with, as one
 * route of a configuration. A bad option throws a `ConfigError` at construction, naming the field
 * as the options spell it (`limits[0].rate: ...`).
 *
 * @example compileOptions("rateLimit", options, { name: "api", limits: [{ name: "per-ip", rate: 10, period: "1s" }] })
 */
export function compileOptions(
  middleware: string,
  options: SharedOptions,
  route: Record<string, unknown>,
  table?: string,
): Config {
  const shared = Object.fromEntries(SHARED_FIELDS.flatMap((f) => (options[f] === undefined ? [] : [[f, options[f]]])));
  const loaded = loadConfig({ SLUICE: { ...shared, routes: [{ match: "/*", ...route }] }, originOptional: true });
  if (loaded.ok) return loaded.config;
  // the options spell a route's table (idempotency, session, breaker) at their top level
  const inTable = table ? new RegExp(`^${table}\\.?`) : /^$/;
  const field = loaded.error.field
    .replace(/^SLUICE\.routes\[0\]\.?/, "")
    .replace(/^SLUICE\.?/, "")
    .replace(inTable, "");
  throw new ConfigError(`${middleware}(): ${field || "options"}`, loaded.error.problem);
}

/** How a middleware reaches Redis: what it was given, else the Worker's secrets. */
function connectionOf(options: SharedOptions, c: Context, config: Config): Connect {
  const given = options.redis;
  if (given === undefined) return envConnections((c.env ?? {}) as Env, config.home_region);
  const connection = typeof given === "function" ? given(c) : given;
  return () => connection;
}

/**
 * A step (or steps, in order) as a middleware of its own, for an app of the user's: its scope is
 * made per request from its options, and what it decides is stamped on the response
 * (`Sluice-Decision`, `Sluice-Region`, unless a sluice middleware nearer the handler stamped it
 * already). A refusal is answered with its problem, as the gateway's `onError` would.
 */
export function standalone(
  config: Config,
  options: SharedOptions,
  steps: Step[],
  gateway = { matchRoutes: false },
): MiddlewareHandler<SluiceEnv> {
  return async (c, next) => {
    const runtime = options.runtime ?? isolateRuntime();
    let scope: Scope;
    try {
      scope = newScope(
        c,
        { runtime, config, connect: connectionOf(options, c, config), env: (c.env ?? {}) as Env },
        gateway.matchRoutes,
      );
    } catch (e) {
      if (!(e instanceof ScopedProblem)) throw e;
      answer(c, e, config.problem_base);
      stamp(c, e.scope);
      return;
    }
    if (!gateway.matchRoutes) scope.route = config.routes[0];
    if (scope.route) scope.meta = { route: scope.route.name, limit: "-" };
    scope.target = forwardTarget(config, scope);
    // sluice(config)'s routes decide on one method: the app's handlers see no override they did not honour
    if (gateway.matchRoutes && !scope.target && !scope.methodOverridden) c.req.raw = withoutOverride(c.req.raw);
    const claims = c.get("jwtPayload" as never) as unknown;
    if (claims && typeof claims === "object") scope.facts.claims = claims as Record<string, unknown>;
    c.set("sluiceScope", scope);
    c.set("sluice", publicDecision(scope));
    await chain(c, scope, steps, next)();
    if (!c.res.headers.has("Sluice-Decision")) stamp(c, scope);
    else if (scope.meta) record(scope, scope.meta, decisionOf(c, scope), countsAsDecision(c));
  };
}

/**
 * Steps in order, each one's `next` the one after it, the last one's the app's own `next`, with
 * Hono's semantics: a step's response becomes `c.res`, and a problem it throws is answered where
 * it was thrown (`c.error`, `c.res`), so the steps before it still do their work after the response.
 */
export function chain(c: Context<SluiceEnv>, scope: Scope, steps: Step[], next: Next): () => Promise<void> {
  return steps.reduceRight<() => Promise<void>>(
    (inner, step) => async () => {
      try {
        const res = await step(c, scope, inner);
        // a step that passed the request on returns what Hono's `next` resolves to: not a response
        if (res instanceof Response) c.res = res;
      } catch (e) {
        if (!(e instanceof Problem)) throw e;
        answer(c, e, scope.config.problem_base);
      }
    },
    next,
  );
}

function answer(c: Context, p: Problem, base: string): void {
  c.error = p;
  c.res = undefined;
  c.res = p.getResponse(base);
}
