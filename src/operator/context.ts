/*
 * What every admin route is written with, the capabilities' own (src/features/<capability>/admin*.ts) and
 * the admin's (src/admin/): the context they find, a store they cannot do without, deferred work.
 * It stands below the capabilities, so theirs never import the admin that mounts them.
 */
import type { Context } from "hono";
import { createFactory } from "hono/factory";
import type { Config } from "../config/index.js";
import type { Env } from "../env.js";
import type { Defer } from "../util/defer.js";
import { Problem } from "../problem.js";
import type { ProblemKind } from "../problem-types.js";
import type { Stores } from "../region/index.js";
import type { Store } from "../store/redis.js";
import type { Duty, ServedView } from "./served.js";
import { badRequest } from "./validate.js";

/** The dashboard's session cookie (set by the admin's guard, read by whoever names the operator). */
export const ADMIN_SESSION_COOKIE = "sluice_admin";

/**
 * What every admin handler finds on its context: the deployment's configuration and databases
 * (set by the admin's `withConfig`), `authorised`: the request carried the admin token or a valid
 * dashboard session (set by the guard; health says more then), and `served`: in `adminApi()`,
 * what the app's middleware serve (unset in the gateway, which serves every configured route).
 */
export type AdminEnv = {
  Bindings: Env;
  Variables: { config: Config; stores: Stores; authorised: boolean; served: ServedView | undefined };
};

/**
 * Refuses (400, naming the field) a write that would change nothing in this app: `route` (its
 * `limit`) is served by no middleware doing `duty` (src/operator/served.ts). The gateway serves
 * every route it has, so there nothing is refused.
 */
export function requireServed(c: Context<AdminEnv>, route: string, duty: Duty, limit?: string): void {
  const gap = c.get("served")?.gap(route, duty, limit);
  if (gap) throw badRequest(`${gap.field}: ${gap.detail}`);
}

/**
 * Handlers written apart from the sub-app that mounts them, typed with the admin's context (and
 * with what their validators check).
 *
 * @example const removeEntry = adminHandlers.createHandlers(jsonBody(removal), (c) => c.json(c.req.valid("json")));
 */
export const adminHandlers = createFactory<AdminEnv>();

/** A problem type that says a store is missing: a 503 (the compiler refuses any other). */
export type Unavailable = Extract<ProblemKind, { status: readonly [503] }>;

/** A store the route cannot do without: its absence (no Redis configured) is a 503 problem. */
export function required(store: Store | undefined, type: Unavailable, detail: string): Store {
  if (!store) throw new Problem({ type, detail });
  return store;
}

/** `ctx.waitUntil` where the runtime gives one (always on Workers); otherwise the work just runs. */
export function deferOf(c: Context<AdminEnv>): Defer {
  try {
    const ctx = c.executionCtx;
    return (work) => ctx.waitUntil(work);
  } catch {
    // Hono throws when the app was called without an execution context (tests calling it bare)
    return (work) => void work;
  }
}
