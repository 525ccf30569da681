import type * as z from "zod/mini";
import type { LimitSettings, RouteSettings, SluiceSettings } from "./schema.js";
import { enLocale } from "./messages.js";
import { exactnessProblem, maxDelayProblem, responseMaxProblem } from "./exactness.js";
import { compilePattern, type PathPattern } from "../routing/match.js";
import { divertReasons, type DivertReason } from "../features/shedding/defaults.js";

/** A limit as the request path uses it (durations in ms, key as a list of parts). */
export type Limit = LimitSettings;

export interface Route extends Omit<RouteSettings, "limits"> {
  pattern: PathPattern;
  limits: Limit[];
  /** `divert_url`, parsed once at load (the schema has checked it is an http(s) URL). */
  divertUrl?: URL;
  /** When it goes to `divertUrl`: `divert_on` as given, else `["limit"]`; none without a `divert_url`. */
  divertOn: DivertReason[];
}

export interface Config extends Omit<SluiceSettings, "routes"> {
  /** Where allowed requests go; none for middleware in an app, whose handlers answer. */
  originUrl?: URL;
  routes: Route[];
}

/**
 * A configuration problem, always naming the field at fault: `field` by its path
 * (`SLUICE.routes[4].limits[0].rate`, for programs), `label` as people read it, with the names of
 * the routes and limits on the way (`SLUICE.routes[4] ("orders").limits[0] ("per-ip").rate`),
 * which the message starts with.
 */
export class ConfigError extends Error {
  readonly label: string;

  constructor(
    readonly field: string,
    readonly problem: string,
    label?: string,
  ) {
    super(`${label ?? field}: ${problem}`);
    this.name = "ConfigError";
    this.label = label ?? field;
  }

  /** The same error with `field` and `label` rewritten alike (a middleware spells its options its own way). */
  respelled(rewrite: (name: string) => string): ConfigError {
    return new ConfigError(rewrite(this.field), this.problem, rewrite(this.label));
  }
}

/**
 * The error for the field at `path` in `root` (the configuration as given): its path, and its
 * label naming each route and limit on the way (any element of a list that has a `name`).
 *
 * @example fieldError(["SLUICE", "routes", 4, "limits", 0, "rate"], "…", { SLUICE }).label // 'SLUICE.routes[4] ("orders").limits[0] ("per-ip").rate'
 */
export function fieldError(path: ReadonlyArray<PropertyKey>, problem: string, root: unknown): ConfigError {
  let field = "";
  let label = "";
  let at: unknown = root;
  for (const p of path) {
    at = at !== null && typeof at === "object" ? (at as Record<PropertyKey, unknown>)[p] : undefined;
    const step = typeof p === "number" ? `[${p}]` : field ? `.${String(p)}` : String(p);
    field += step;
    label += step + (typeof p === "number" ? nameOf(at) : "");
  }
  return new ConfigError(field, problem, label);
}

/** ` ("name")` for an element of a list that has a name, quoted as JSON (at most 63 characters of it). */
function nameOf(element: unknown): string {
  const name = element !== null && typeof element === "object" ? (element as { name?: unknown }).name : undefined;
  return typeof name === "string" && name !== "" ? ` (${JSON.stringify(name.slice(0, 63))})` : "";
}

export type ConfigResult = { ok: true; config: Config } | { ok: false; error: ConfigError };

/**
 * A schema of `[vars.SLUICE]` (./settings.ts composes them): the gateway's, whose routes take
 * every feature's table, or a middleware's, whose routes take only its own.
 */
export type ConfigSchema = z.ZodMiniType<SluiceSettings>;

/**
 * Validates the `SLUICE` settings with `schema` (and, from a Worker's variables, `ORIGIN_URL`: see
 * `ConfigSource`), and compiles them into what the request path needs. Never throws: a bad
 * configuration is a value, so the Worker can answer every request with it and `npm run check` can print it.
 *
 * @example
 * const r = loadConfigWith(sluiceSchema(), { ORIGIN_URL: "https://api.example.com", SLUICE: { routes: [] } }, WORKER_SOURCE);
 * if (!r.ok) console.error(r.error.message); // e.g. 'SLUICE.routes[0] ("api").limits[0] ("per-ip").rate: ...'
 */
export function loadConfigWith(
  schema: ConfigSchema,
  vars: ConfigVars,
  source: ConfigSource,
  checks: readonly RouteCheck[] = [],
): ConfigResult {
  try {
    return { ok: true, config: compile(schema, vars, source, checks) };
  } catch (e) {
    if (e instanceof ConfigError) return { ok: false, error: e };
    throw e;
  }
}

/** The variables the configuration comes from, and whether the Worker has a queue binding. */
export interface ConfigVars {
  ORIGIN_URL?: unknown;
  SLUICE?: unknown;
  /** False when the Worker has no SLUICE_QUEUE producer: `on_limit = "queue"` is then an error. */
  hasQueue?: boolean;
  /** Whether a secret is set; a route keyed on JWT claims needs the HMAC secret (or a JWKS URL). */
  hasSecret?: (name: string) => boolean;
  /** Middleware in an app: without `ORIGIN_URL` the app's own handlers answer. */
  originOptional?: boolean;
}

/**
 * Where a configuration comes from, and what that asks of it besides its schema: the gateway's
 * Worker variables (`WORKER_SOURCE`, ./worker-source.ts: `ORIGIN_URL`, `SLUICE` as JSON text, the
 * bindings its routes need), or a middleware's options (`OPTIONS_SOURCE`: no origin, the settings
 * as given, nothing of a Worker to check).
 */
export interface ConfigSource {
  /** Where allowed requests go (a `ConfigError` when it is malformed), or none. */
  origin(vars: ConfigVars): URL | undefined;
  /** The settings as written, before the schema reads them. */
  settings(vars: ConfigVars): unknown;
  /** What the parsed settings need of where they run. */
  check(s: SluiceSettings, vars: ConfigVars, written: unknown, originUrl: URL | undefined): void;
}

/** A middleware's options: no origin (the app's handlers answer), the settings object as given. */
export const OPTIONS_SOURCE: ConfigSource = {
  origin: () => undefined,
  settings: (vars) => vars.SLUICE ?? {},
  check: () => undefined,
};

/**
 * A capability's own check of a parsed route that its schema cannot make alone (it needs the
 * origin): given by whoever composes that capability (the gateway's `loadConfig`, a middleware's
 * `compileOptions`), so that a Worker without the capability carries none of its checks.
 */
export type RouteCheck = (r: RouteSettings, ri: number, originUrl: URL | undefined, written: unknown) => void;

function compile(schema: ConfigSchema, vars: ConfigVars, source: ConfigSource, checks: readonly RouteCheck[]): Config {
  const originUrl = source.origin(vars);
  const raw = source.settings(vars);
  // jitless: a configuration is parsed once per isolate, so compiling a fast path for each object
  // schema (`new Function`, where the runtime allows it; workerd does not) would cost more than it saves
  const parsed = schema.safeParse(raw, { error: enLocale.localeError, jitless: true });
  // fields are named in the configuration as written: its routes' and limits' names are there
  const written = { SLUICE: raw };
  if (!parsed.success) {
    const issue = parsed.error.issues[0] as z.core.$ZodIssue;
    throw fieldError(["SLUICE", ...issue.path], issue.message, written);
  }
  const s = parsed.data;
  source.check(s, vars, written, originUrl);
  for (const check of checks) s.routes.forEach((r, ri) => check(r, ri, originUrl, written));
  s.routes.forEach((r, ri) => checkMcpWindow(r, ri, written));
  return {
    ...s,
    originUrl,
    routes: s.routes.map((r, ri) => ({
      ...r,
      pattern: compilePattern(r.match, s.paths),
      divertUrl: r.divert_url === undefined ? undefined : new URL(r.divert_url),
      divertOn: divertReasons(r),
      limits: r.limits.map((l, li) =>
        compileLimit({ ...l, shadow: l.shadow || r.shadow }, (path, problem) =>
          fieldError(["SLUICE", "routes", ri, "limits", li, ...path], problem, written),
        ),
      ),
    })),
  };
}

/** The error for a field of the limit being compiled, by its path within the limit. */
type LimitError = (path: string[], problem: string) => ConfigError;

/**
 * An MCP route keeps a guarded call's result `mcp.window` from its answer (its `ttl`): as with a
 * key's ttl, at least the call (`origin_timeout`), and longer than the claim's `lease`.
 */
function checkMcpWindow(r: RouteSettings, ri: number, written: unknown): void {
  if (!r.mcp) return;
  const lease = r.idempotency?.lease ?? 30_000;
  const floor = Math.max(r.origin_timeout, lease + 1);
  if (r.mcp.window >= floor) return;
  throw fieldError(
    ["SLUICE", "routes", ri, "mcp", "window"],
    `must be at least the route's origin_timeout (${r.origin_timeout} ms) and longer than the claims' lease (${lease} ms): a call's result is kept this long from its answer`,
    written,
  );
}

/**
 * decide.lua counts in integers that must stay within a double's exact range: the limit's own
 * figures and every tier's (a tier's burst is its rate) are checked alike.
 */
function compileLimit(l: LimitSettings, error: LimitError): Limit {
  const own = exactnessProblem({ algorithm: l.algorithm, rate: l.rate, burst: l.burst, periodMs: l.period });
  if (own) throw error([own.field], own.message);
  for (const [tier, t] of Object.entries(l.rates ?? {})) {
    const problem = exactnessProblem({ algorithm: l.algorithm, rate: t.rate, burst: t.rate, periodMs: t.period });
    if (problem) throw error(["rates", tier], `tier "${tier}": ${problem.message}`);
  }
  const delay = maxDelayProblem(l.max_delay);
  if (delay) throw error(["max_delay"], delay);
  if (l.responseCost) checkResponseMax(l, l.responseCost.max, error);
  return l;
}

/** A cost from the response settles up to `max` tokens: exactly, at the limit's rate and every tier's. */
function checkResponseMax(l: LimitSettings, max: number, error: LimitError): void {
  const rates = [
    { rate: l.rate, periodMs: l.period },
    ...Object.values(l.rates ?? {}).map((t) => ({ rate: t.rate, periodMs: t.period })),
  ];
  for (const r of rates) {
    const problem = responseMaxProblem(max, r);
    if (problem) throw error(["cost", "max"], problem);
  }
}
