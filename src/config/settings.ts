import * as z from "zod/mini";
import { deferred, lazy } from "./lazy.js";
import { duration, flag, method, name, oneOf } from "./primitives.js";
import { DEFAULT_PROBLEM_BASE } from "../problem.js";
import { adaptiveLimit, adaptiveSettings, ADAPTIVE_LIMIT } from "../features/rate-limit/adaptive/schema.js";
import { jwtSettings } from "../features/jwt/schema.js";
import { limit, priority } from "../features/rate-limit/schema.js";
import { sheddingDefaults } from "../features/shedding/defaults.js";
import { divertProblems, sheddingOptions } from "../features/shedding/schema.js";

// The configuration's schema, composable: the deployment's settings and a route's own fields are
// here, and a route's feature tables (breaker, session, idempotency) are given by whoever composes
// it. The gateway composes them all (./schema.ts); a middleware only its own, so an app that
// imports `rateLimit` alone bundles no schema of a feature it does not use. Nothing is built at
// import (./lazy.ts): a composition builds its schema on first use, and a field a configuration
// leaves out (a feature's settings, an optional table) is built only when one sets it.

/**
 * A route's fields every composition has: what it matches, and its limits with their shedding
 * (the options, `sheddingOptions()`, or a middleware's defaults alone, `sheddingDefaults()`).
 */
const routeFields = <S extends z.core.$ZodLooseShape>(shedding: S) => ({
  name: name(),
  match: z.string().check(z.regex(/^\/[^\s?#]*$/, 'must be a path pattern starting with "/" (no query, no spaces)')),
  methods: z.optional(deferred(() => z.array(method()).check(z.minLength(1)))),
  /**
   * The origin acts on `X-HTTP-Method-Override` (and `X-HTTP-Method`, `X-Method-Override`) of a
   * POST here: sluice decides on that method and forwards the header. Off: the headers are
   * stripped and the request is the method it was sent with.
   */
  method_override: flag(),
  ...shedding,
  origin_timeout: z._default(duration(), 30_000),
  /**
   * Decide without spending: the request always goes through, with the RateLimit headers of the
   * buckets as they stand: this route's own (`true`), or another route's, named (a quota endpoint).
   */
  peek: z._default(
    deferred(() => z.union([z.boolean(), name()])),
    false,
  ),
  /**
   * The requests' priority (docs/algorithms.md, Priorities): a name, or a header or JWT claim that holds one
   * (anything else, or nothing: default). A header is only as trusted as the operator makes it.
   */
  priority: z._default(deferred(priority), "default"),
  /** Every limit of the route in shadow mode: decide and count, never block (how a new route is rolled out). */
  shadow: flag(),
  /** An in-flight limit for the route's origin that follows its latency (docs/algorithms.md, Adaptive limit). */
  adaptive: z.optional(deferred(adaptiveSettings)),
  limits: z._default(z.array(limit()), []),
});

type RouteFields = z.output<z.ZodMiniObject<ReturnType<typeof routeFields<ReturnType<typeof sheddingOptions>>>>>;
/** A route of some composition: its own fields, and whichever tables it was given. */
type ComposedRoute = RouteFields & { breaker?: unknown; idempotency?: unknown; session?: unknown; mcp?: unknown };

/** Problems among a route's fields that one composition has and another not (the divert's). */
type RouteProblems = (r: ComposedRoute) => Array<[string, string]>;

/** A route's limits: unique names, none taking the adaptive limit's; then the composition's own `more` (a divert route's fields together). */
function routeProblems(r: ComposedRoute, ctx: z.core.$RefinementCtx, more?: RouteProblems) {
  const seen = new Set<string>();
  r.limits.forEach((l, i) => {
    if (seen.has(l.name) || (r.adaptive && l.name === ADAPTIVE_LIMIT))
      ctx.addIssue({
        code: "custom",
        path: ["limits", i, "name"],
        message: seen.has(l.name)
          ? `duplicate limit name "${l.name}" in route "${r.name}"`
          : `"${ADAPTIVE_LIMIT}" is the name of the route's adaptive limit: give this one another`,
      });
    seen.add(l.name);
  });
  mcpOnlyProblems(r).forEach(([path, message]) => ctx.addIssue({ code: "custom", path, message }));
  more?.(r).forEach(([path, message]) => ctx.addIssue({ code: "custom", path: [path], message }));
}

/**
 * What only a route with an `mcp` table reads (docs/mcp.md): a limit's `tools` and the key part
 * `"tool"` (elsewhere no request names a tool, so they could never mean anything). A session lock
 * per HTTP request would lock every message of an MCP endpoint, its handshake and lists included.
 */
function mcpOnlyProblems(r: ComposedRoute): Array<[Array<string | number>, string]> {
  const problems: Array<[Array<string | number>, string]> = [];
  if (r.mcp !== undefined) {
    if (r.session !== undefined) problems.push([["session"], "does not go with an mcp table (docs/mcp.md)"]);
    return problems;
  }
  r.limits.forEach((l, i) => {
    if (l.tools) problems.push([["limits", i, "tools"], "applies only on a route with an mcp table (docs/mcp.md)"]);
    if (l.key.includes("tool") || l.tier === "tool")
      problems.push([["limits", i, "key"], '"tool" is a key only on a route with an mcp table (docs/mcp.md)']);
  });
  return problems;
}

/** An adaptive route is decided with one more limit: the in-flight limit that follows its origin. */
function withAdaptiveLimit<R>(route: R): R {
  // R is a route with the composition's tables: its own fields are RouteFields' (checked by tsc where R is known)
  const r = route as R & RouteFields;
  return r.adaptive ? { ...r, limits: [...r.limits, adaptiveLimit(r.adaptive, r.origin_timeout)] } : r;
}

/** A route's schema, with the shedding given and the feature tables given (each an optional table of the route). */
function routeSchema<S extends z.core.$ZodLooseShape, T extends z.core.$ZodLooseShape>(
  shedding: S,
  tables: T,
  more?: RouteProblems,
) {
  const fields = z
    .strictObject({ ...routeFields(shedding), ...tables })
    .check(z.superRefine((r, ctx) => routeProblems(r as unknown as ComposedRoute, ctx, more)));
  return z.pipe(
    fields,
    z.transform((r: z.output<typeof fields>) => withAdaptiveLimit(r)),
  );
}

const region = () =>
  z.strictObject({
    continents: z._default(
      z.array(z.string().check(z.regex(/^[A-Z]{2}$/, "must be a two-letter continent code such as EU"))),
      [],
    ),
    colos: z._default(
      z.array(z.string().check(z.regex(/^[A-Z]{3}$/, "must be a three-letter colo code such as FRA"))),
      [],
    ),
  });

const pathPolicy = () =>
  z.strictObject({
    /** insensitive: /API/x and /api/x are one path for routes and `path` keys. */
    case: z._default(z.enum(["insensitive", "sensitive"]), "insensitive"),
    /** ignore: /api/x/ and /api/x are one path; strict: they are two. */
    trailing_slash: z._default(z.enum(["ignore", "strict"]), "ignore"),
    /**
     * strip: `;params` are cut from each segment before matching (Tomcat and Spring origins do so:
     * `/public/..;/admin` is their `/admin`); reject: a path with `;` (or `%3B`) is a 400.
     */
    parameters: z._default(z.enum(["strip", "reject"]), "strip"),
  });

/**
 * The path policy of a configuration that sets none: what `pathPolicy().parse({})` gives (a unit
 * test holds them equal), written out so that such a configuration builds no path schema.
 */
export function pathDefaults(): z.output<ReturnType<typeof pathPolicy>> {
  return { case: "insensitive", trailing_slash: "ignore", parameters: "strip" };
}

function parses(url: string): boolean {
  try {
    return new URL(url).host !== "";
  } catch {
    return false;
  }
}

/** A problem type's base: an absolute http(s) URL or an absolute path, ending in "/" (the type's name follows it). */
const problemBase = () =>
  z.string().check(
    z.maxLength(200),
    z.refine(
      // "//host/" would be a URL of whatever scheme the client used: a path starts with one slash
      (v) => /^\/(?:(?!\/)[^\s?#]*\/)?$/.test(v) || (/^https?:\/\/[^\s?#]+\/$/i.test(v) && parses(v)),
      'must be an http(s) URL or an absolute path ending in "/", such as "https://errors.example.com/sluice/"',
    ),
  );

const budget = /* @__PURE__ */ lazy(() => z.int().check(z.minimum(1), z.maximum(10_000)));

/** The deployment's settings: everything of `[vars.SLUICE]` but its routes. */
const deploymentFields = () => ({
  key_prefix: z._default(
    z.string().check(z.regex(/^[A-Za-z0-9_.-]{1,32}$/, "must be 1-32 characters of letters, digits, '_', '.', '-'")),
    "sluice",
  ),
  /** The floor of a decision's Redis budget, which adapts to each store's round trip (src/store/rtt.ts). */
  timeout_ms: z._default(budget(), 50),
  /** The ceiling of that budget, and the whole budget of an isolate's first call to a store; default max(1000, timeout_ms). */
  max_timeout_ms: z.optional(budget()),
  /** Deprecated and ignored: the budget of the home region's Redis adapts like any store's. Accepted so old configurations still load. */
  global_timeout_ms: z.optional(budget()),
  /** When the decision's Redis fails: enforce the limits in this isolate (local), forward without them (open), or 503 (closed). */
  on_store_error: oneOf(["local", "open", "closed"], "local"),
  rebalance_every: z._default(duration(), 5_000),
  home_region: z._default(name(), "home"),
  regions: z._default(
    deferred(() => z.record(name(), region())),
    {},
  ),
  jwt: z.optional(deferred(jwtSettings)),
  paths: z._default(deferred(pathPolicy), pathDefaults),
  /**
   * Where problem `type` URIs point (RFC 9457 §3.1.1): a URL or a path of the deployment's own,
   * never a domain it does not control. The default is served by the Worker itself (docs/configuration.md, Responses).
   */
  problem_base: z._default(deferred(problemBase), DEFAULT_PROBLEM_BASE),
  /** Where decision counts go (docs/operating.md, Metrics): the home region's Redis, at most once per isolate per interval, or nowhere. */
  metrics: oneOf(["redis", "off"], "redis"),
  /** What the dashboard shows of a refused client next to its hash (docs/operating.md, Labels of refused clients). */
  labels: oneOf(["full", "masked", "off"], "masked"),
  /** How long a dashboard session may go unused before it ends (docs/operating.md, Admin API); within its 12 hours. */
  admin_session_idle: z._default(
    deferred(() =>
      duration().check(z.refine((ms) => ms >= 1_000 && ms <= 12 * 3_600_000, "must be between 1s and 12h")),
    ),
    30 * 60_000,
  ),
  /** Entries the ledger keeps (docs/idempotency-and-sessions.md, The ledger): its stream is trimmed to about this many. */
  ledger_length: z._default(
    deferred(() => z.int().check(z.minimum(100), z.maximum(1_000_000))),
    10_000,
  ),
});

type Deployment = z.output<z.ZodMiniObject<ReturnType<typeof deploymentFields>>> & { routes: RouteFields[] };

/** What spans routes: the budget's floor and ceiling, route names, peeks, split limits across the regions. */
function deploymentProblems(c: Deployment, ctx: z.core.$RefinementCtx) {
  if (c.max_timeout_ms !== undefined && c.max_timeout_ms < c.timeout_ms) {
    ctx.addIssue({
      code: "custom",
      path: ["max_timeout_ms"],
      message: `must be at least timeout_ms (${c.timeout_ms}): it is the ceiling of the budget timeout_ms is the floor of`,
    });
  }
  const seen = new Set<string>();
  const regionCount = new Set([c.home_region, ...Object.keys(c.regions)]).size;
  c.routes.forEach((r, i) => {
    if (typeof r.peek === "string" && !c.routes.some((o) => o.name === r.peek))
      ctx.addIssue({ code: "custom", path: ["routes", i, "peek"], message: `names no route ("${r.peek}")` });
    if (seen.has(r.name))
      ctx.addIssue({ code: "custom", path: ["routes", i, "name"], message: `duplicate route name "${r.name}"` });
    seen.add(r.name);
    r.limits.forEach((l, j) => {
      if (l.scope === "split" && Math.min(l.rate, l.burst) < regionCount) {
        ctx.addIssue({
          code: "custom",
          path: ["routes", i, "limits", j, "scope"],
          message: `a split limit needs rate and burst of at least one per region (${regionCount} regions)`,
        });
      }
    });
  });
}

/**
 * The schema of `[vars.SLUICE]` with routes that take the feature tables given (each an optional
 * table of a route, e.g. `{ breaker: z.optional(breakerSettings) }`): the gateway gives them all.
 */
export function configSchema<T extends z.core.$ZodLooseShape>(tables: T) {
  return deploymentSchema(routeSchema(sheddingOptions(), tables, divertProblems));
}

/** The deployment's settings, with routes of the schema given. */
function deploymentSchema<R extends z.core.SomeType>(route: R) {
  return z
    .strictObject({ ...deploymentFields(), routes: z._default(z.array(route), []) })
    .check(z.superRefine((c, ctx) => deploymentProblems(c as unknown as Deployment, ctx)));
}

/**
 * The schema of a configuration whose routes take no feature table of their own and set no
 * shedding option (a middleware's: `rateLimit()`, `limiter()`, the lists), built on first use:
 * its routes get the shedding defaults without the options' schemas (`sheddingDefaults()`).
 */
export const plainConfigSchema = /* @__PURE__ */ lazy(() => deploymentSchema(routeSchema(sheddingDefaults(), {})));
