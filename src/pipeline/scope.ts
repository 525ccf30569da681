import type { Context } from "hono";
import type { Config } from "../config/index.js";
import type { Scope, SluiceEnv } from "../context.js";
import type { Env } from "../env.js";
import { clientIp } from "../identity/identify.js";
import type { Defer } from "../util/defer.js";
import { Problem } from "../problem.js";
import { redisNotConfigured } from "./redis-required.js";
import { PROBLEMS } from "../problem-types.js";
import { chooseRegion, type Connect } from "../region/index.js";
import { normalisePath } from "../routing/normalise.js";
import { chooseRoute } from "../routing/method.js";
import type { Runtime } from "../runtime.js";

/** `ctx.waitUntil` where the runtime gives one (always, on Workers); otherwise work just runs. */
export function deferrer(c: Context): Defer {
  try {
    const ctx = c.executionCtx;
    return (work) => ctx.waitUntil(work);
  } catch {
    return (work) => void work;
  }
}

/** Where a scope's request stands before any step: its configuration, region and normalised path. */
export interface ScopeInput {
  runtime: Runtime;
  config: Config;
  connect: Connect;
  env: Env;
}

/**
 * The scope of one request: the region that decides it (from `request.cf`), its path in normal
 * form (a path that cannot be normalised is a 400 problem), the route it matches (`matchRoutes`;
 * otherwise the configuration's one route, a standalone middleware's; none: no limits), the facts
 * its identities are read from and where an allowed request goes. All of it is the request's
 * value, made here once; the steps fill in only what they decide.
 */
export function newScope(c: Context, input: ScopeInput, matchRoutes: boolean): Scope {
  const { runtime, config, connect, env } = input;
  const request = c.req.raw;
  const region = chooseRegion(config, request.cf as { colo?: string; continent?: string } | undefined);
  const url = new URL(request.url);
  const normal = normalisePath(url.pathname, config.paths);
  const matchPath = normal.ok ? normal.path.match : "/";
  const facts = { ip: clientIp(request.headers), matchPath, headers: request.headers, url };
  const value = { runtime, config, region, stores: runtime.stores(connect, config), facts, defer: deferrer(c), env };
  const method = request.method.toUpperCase();
  if (!normal.ok) {
    const partial: Scope = { ...value, forwardPath: "/", method, methodOverridden: false, ...nothingDecided() };
    throw new ScopedProblem(partial, { type: PROBLEMS.badRequestPath, status: normal.status, detail: normal.detail });
  }
  const chosen = matchRoutes
    ? chooseRoute(config.routes, request, normal.path.match)
    : { route: config.routes[0], method, overridden: false };
  const routed = {
    route: chosen.route,
    method: chosen.method,
    methodOverridden: chosen.overridden,
    forwardPath: normal.path.forward,
  };
  return { ...value, ...routed, target: forwardTarget(config, { ...routed, facts }), ...nothingDecided() };
}

/** What the steps decide, before any has: an allowed request. */
function nothingDecided(): Pick<Scope, "decision" | "allowListed"> {
  return { decision: "allow", allowListed: false };
}

/** A problem found while the scope was being made: the scope still tells the region it is stamped with. */
export class ScopedProblem extends Problem {
  constructor(
    readonly scope: Scope,
    init: ConstructorParameters<typeof Problem>[0],
  ) {
    super(init);
  }
}

/** How a pipeline makes its request's scope; throws a problem (a `ScopedProblem` when a scope exists). */
export type ScopeSource = (c: Context<SluiceEnv>) => Scope;

/** A scope ready for the steps (a guarded route's Redis is configured, else its 500 problem): the route it is counted under. */
export function entered(scope: Scope): Scope {
  const notConfigured = redisNotConfigured(scope);
  if (notConfigured) throw new ScopedProblem(scope, notConfigured);
  if (scope.route) scope.meta = { route: scope.route.name, limit: "-" };
  return scope;
}

/**
 * Where an allowed request goes, when the configuration names an origin (an app's own handlers
 * answer otherwise): the forward form of its path, its client, and its route's timeout.
 */
function forwardTarget(
  config: Config,
  request: Pick<Scope, "route" | "forwardPath" | "methodOverridden" | "facts">,
): Scope["target"] {
  if (!config.originUrl) return undefined;
  return {
    origin: config.originUrl,
    path: request.forwardPath,
    clientIp: request.facts.ip,
    timeoutMs: request.route?.origin_timeout,
    problemBase: config.problem_base,
    methodOverride: request.methodOverridden,
  };
}
