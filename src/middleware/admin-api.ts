/**
 * `sluice/admin`: the admin API and dashboard in an app of your own.
 *
 * @example
 * import { adminApi } from "sluice/admin";
 * app.use("/api/*", rateLimit({ key_prefix: "shop", name: "api", limits }));
 * app.route("/", adminApi({ key_prefix: "shop" })); // shows and manages route "api"
 */
import { Hono, type Context, type ExecutionContext, type MiddlewareHandler } from "hono";
import { adminApp } from "../admin/index.js";
import { adminRequest } from "../admin/path.js";
import { loadConfig, type Config } from "../config/index.js";
import type { SluiceInput } from "../config/schema.js";
import type { LimitOptions } from "./rate-limit.js";
import type { AdminEnv } from "../operator/context.js";
import { isolateRuntime, type Runtime } from "../runtime.js";
import { ServedRoutes, ServedView } from "../operator/served.js";
import { connectionOf, SHARED_FIELDS, type SharedOptions } from "./standalone.js";

export type { SharedOptions } from "./standalone.js";

type RouteInput = NonNullable<SluiceInput["routes"]>[number];

type PlainLimit = NonNullable<RouteInput["limits"]>[number];

/**
 * `config` as `sluice(config)` takes it, whose routes' limits may also be written as `rateLimit()`
 * takes them, so one `LimitOptions[]` can serve both (route by route, limit by limit).
 */
export type AdminConfigInput = Omit<SluiceInput, "routes"> & {
  routes?: Array<Omit<RouteInput, "limits"> & { limits?: ReadonlyArray<PlainLimit | LimitOptions> }>;
};

export interface AdminApiOptions extends SharedOptions {
  /**
   * The deployment as `sluice(config)` takes it (and `[vars.SLUICE]` spells it). Without `routes`
   * the admin API shows and manages the routes the app's sluice middleware serve under its
   * `key_prefix`, by the names they were given (`rateLimit({ name: "api", … })`): what an app that
   * mounts it beside them needs. With `routes` (an admin API apart from the middleware, in another
   * Worker on the same Redis) it shows those; a route no middleware of the same app serves is then
   * said so on the dashboard, and a write for it refused. The shared options (`key_prefix`,
   * `regions`, ...) given beside it win, so they can be the very object given to `rateLimit()`.
   */
  config?: AdminConfigInput;
}

/**
 * The gateway's admin API and dashboard (the same routes, the same auth: `Authorization: Bearer
 * <SLUICE_ADMIN_TOKEN>` from the app's env, compared in constant time, or a dashboard session) as
 * a Hono app serving `/__sluice/*` in every spelling the gateway takes (paths normalised first),
 * for `app.route("/", adminApi(...))`. Its pages link to `/__sluice/…`, so it is mounted at the
 * root, never under another path. It reads and writes the Redis keys the middleware use when
 * given the same `key_prefix` and `redis`, so a deny entry put through it is enforced by
 * `accessLists()`; its routes are theirs unless `config.routes` names others. A bad option throws
 * a `ConfigError` naming the field.
 */
export function adminApi(options: AdminApiOptions = {}): Hono<AdminEnv> {
  const config = compileAdminOptions(options);
  const runtime = options.runtime ?? isolateRuntime();
  const served = runtime.own(ServedRoutes);
  const configNow = options.config?.routes === undefined ? servedConfig(config, served) : () => config;
  const view = new ServedView(served, config.key_prefix);
  const admin = adminApp(runtime, withOptions(configNow, view, options, runtime));
  const app = new Hono<AdminEnv>();
  // Every path is looked at, as the gateway does, rather than routed by the app's router: the
  // prefix is found in the path's normal form (`//__sluice/x`, `/__SLUICE/x`, `/__sluice/`), so a
  // path answers here as it does in the gateway, and none reaches the app's own handlers instead.
  // Handed on whole, so its own not-found and error answers (problems) apply as in the gateway.
  app.use("*", async (c, next) => {
    const request = adminRequest(c.req.raw);
    if (request === undefined) return next();
    return admin.fetch(request, c.env, executionCtxOf(c));
  });
  return app;
}

/** The options validated with the gateway's schema; errors name the field as the options spell it. */
function compileAdminOptions(options: AdminApiOptions): Config {
  const shared = Object.fromEntries(SHARED_FIELDS.flatMap((f) => (options[f] === undefined ? [] : [[f, options[f]]])));
  const loaded = loadConfig({ SLUICE: { ...options.config, ...shared }, originOptional: true });
  if (loaded.ok) return loaded.config;
  const top = loaded.error.field.replace(/^SLUICE\.?/, "");
  // a shared option is given beside `config`; the rest is in it
  const inConfig = shared[top.split(/[.[]/)[0] ?? ""] === undefined && top !== "";
  throw loaded.error.respelled((name) => {
    const field = name.replace(/^SLUICE\.?/, "");
    return `adminApi(): ${(inConfig ? `config.${field}` : field) || "options"}`;
  });
}

/**
 * The admin's configuration whose routes are those the app's middleware serve under its
 * `key_prefix` (src/operator/served.ts), as each recorded its own when it was made: read at each
 * request, made again only when one more middleware has been made since.
 */
function servedConfig(config: Config, served: ServedRoutes): () => Config {
  let made = { version: -1, config };
  return () => {
    if (made.version === served.version) return made.config;
    const routes = [...served.under(config.key_prefix).values()].map((r) => r.route);
    made = { version: served.version, config: { ...config, routes } };
    return made.config;
  };
}

/**
 * The admin's configuration and stores from the options, where the gateway reads the Worker's
 * `SLUICE`, and what the app's middleware serve, which its writes are checked against.
 */
function withOptions(
  configNow: () => Config,
  served: ServedView,
  options: SharedOptions,
  runtime: Runtime,
): MiddlewareHandler<AdminEnv> {
  return async (c, next) => {
    const config = configNow();
    c.set("config", config);
    c.set("stores", runtime.stores(connectionOf(options, c, config), config));
    c.set("authorised", false);
    c.set("served", served);
    await next();
  };
}

/** The request's execution context, if the runtime gave one (Hono throws when asked for a missing one). */
function executionCtxOf(c: Context<AdminEnv>): ExecutionContext | undefined {
  try {
    return c.executionCtx;
  } catch {
    return undefined;
  }
}
