/*
 * Which routes the sluice middleware of an app serve, as `adminApi()` in the same app reads them:
 * its routes when its options name none, and what tells a write that would change nothing (an
 * override of a route no middleware decides, a route mode nothing applies) from one that works.
 */
import type { Config, Route } from "../config/index.js";

/** What a middleware does for its route that an admin write takes effect through. */
export type Duty = "limits" | "lists" | "modes";

/** What each duty means, as a refusal says it is missing. */
const DUTY_TEXT: Record<Duty, string> = {
  limits: "decides limits (rateLimit(), limiter() and sluice() do)",
  lists: "applies the deny and allow lists (accessLists() and sluice() do)",
  modes: "applies route modes (sluice() does; rateLimit() does not)",
};

/** One route as the middleware serving it made it: their names, what they do, the route (limits merged). */
export interface ServedRoute {
  /** The middleware serving it, as their factories are called: `rateLimit()`, `accessLists()`. */
  by: string[];
  duties: Duty[];
  route: Route;
}

/** Bounds on what is kept, so middleware made per request under ever new names cannot grow an isolate's memory. */
const MAX_PREFIXES = 32;
const MAX_ROUTES = 256;

/**
 * The routes the sluice middleware made in this isolate serve, by `key_prefix` (isolate state,
 * `runtime.own(ServedRoutes)`). Each middleware records its route when it is made, so by the
 * time a request reaches `adminApi()` every middleware of the app has; a route several middleware
 * serve under one name (`accessLists({ name: "api" })` and `rateLimit({ name: "api", … })`) is
 * one route, their limits together. Past the bounds a new route is not kept (the admin API then
 * knows less of it, and says nothing it does not know).
 */
export class ServedRoutes {
  private readonly prefixes = new Map<string, Map<string, ServedRoute>>();
  /** Moves with every change, so a view built from the routes knows when to build again. */
  version = 0;

  /** Records that `by` serves `route` under `prefix`, doing `duties` for it. */
  serve(prefix: string, route: Route, by: string, duties: readonly Duty[]): void {
    let routes = this.prefixes.get(prefix);
    if (!routes) {
      if (this.prefixes.size >= MAX_PREFIXES) return;
      this.prefixes.set(prefix, (routes = new Map()));
    }
    const seen = routes.get(route.name);
    if (!seen && routes.size >= MAX_ROUTES) return;
    routes.set(route.name, seen ? joined(seen, route, by, duties) : { by: [by], duties: [...duties], route });
    this.version++;
  }

  /** The routes served under `prefix` (none: no middleware of this isolate uses it). */
  under(prefix: string): ReadonlyMap<string, ServedRoute> {
    return this.prefixes.get(prefix) ?? new Map();
  }

  /** Every prefix some middleware of this isolate uses. */
  get keyPrefixes(): string[] {
    return [...this.prefixes.keys()];
  }
}

/** A route served by one more middleware: its duties and limits added (a limit's first definition kept). */
function joined(seen: ServedRoute, route: Route, by: string, duties: readonly Duty[]): ServedRoute {
  const names = new Set(seen.route.limits.map((l) => l.name));
  const limits = [...seen.route.limits, ...route.limits.filter((l) => !names.has(l.name))];
  // a table (idempotency, session, breaker, adaptive) is whichever middleware has it
  const tables = Object.fromEntries(
    Object.entries(route).filter(([k, v]) => v !== undefined && seen.route[k as keyof Route] === undefined),
  );
  return {
    by: seen.by.includes(by) ? seen.by : [...seen.by, by],
    duties: [...new Set([...seen.duties, ...duties])],
    route: { ...seen.route, ...tables, limits },
  };
}

/** Why a write would change nothing, naming the field of the request at fault. */
export interface Gap {
  field: "route" | "limit" | "routes";
  detail: string;
}

const quoted = (names: Iterable<string>) => [...names].map((n) => `"${n}"`).join(", ");

/**
 * The admin API's view of what the app's middleware serve, under its own `key_prefix`. When no
 * middleware of this isolate is known at all, the admin API runs apart from them (another
 * Worker): it knows nothing of them, and `gap` finds none.
 */
export class ServedView {
  constructor(
    private readonly served: ServedRoutes,
    private readonly prefix: string,
  ) {}

  /** Whether any middleware of this isolate is known (under any prefix). */
  get known(): boolean {
    return this.served.keyPrefixes.length > 0;
  }

  /** The routes served under the admin's prefix. */
  get routes(): ReadonlyMap<string, ServedRoute> {
    return this.served.under(this.prefix);
  }

  /**
   * Why a write for `route` (its `limit`) would change nothing in this app: no middleware serves
   * the route under this `key_prefix`, none of those that do has the `duty`, or they decide no
   * such limit. `undefined` when one applies it, or when no middleware is known here.
   */
  gap(route: string, duty?: Duty, limit?: string): Gap | undefined {
    if (!this.known) return undefined;
    const here = this.routes;
    const served = here.get(route);
    if (!served) return { field: "route", detail: this.unserved(route) };
    if (duty && !served.duties.includes(duty))
      return { field: "route", detail: `no middleware of route "${route}" ${DUTY_TEXT[duty]}` };
    if (limit !== undefined && !served.route.limits.some((l) => l.name === limit)) {
      const limits = served.route.limits.map((l) => l.name);
      return {
        field: "limit",
        detail: `the middleware of route "${route}" decide no limit "${limit}" (${limits.length ? `theirs: ${quoted(limits)}` : "they decide none"})`,
      };
    }
    return undefined;
  }

  /** Why a write for every route (a list entry without `routes`) would change nothing: no middleware here has the duty. */
  gapAnywhere(duty: Duty): string | undefined {
    if (!this.known) return undefined;
    if ([...this.routes.values()].some((r) => r.duties.includes(duty))) return undefined;
    return `no middleware of this app ${DUTY_TEXT[duty]} under key_prefix "${this.prefix}"`;
  }

  /** What the dashboard says of routes the config names and no middleware serves, and of routes served that it does not show. */
  notices(config: Pick<Config, "routes">): string[] {
    if (config.routes.length === 0 && this.routes.size === 0) return [this.noRoutes()];
    if (!this.known) return [];
    const named = new Set(config.routes.map((r) => r.name));
    const unserved = config.routes.filter((r) => !this.routes.has(r.name)).map((r) => this.unserved(r.name));
    const unshown = [...this.routes.entries()]
      .filter(([name]) => !named.has(name))
      .map(
        ([name, r]) =>
          `route "${name}" is served by ${r.by.join(" and ")} but is not in adminApi()'s config: its figures are not shown`,
      );
    return [...unserved, ...unshown];
  }

  /** Why the admin API has no routes: no middleware under its prefix (maybe under another), and no config naming any. */
  private noRoutes(): string {
    const others = this.served.keyPrefixes;
    const where = others.length ? ` (they use key_prefix ${quoted(others)})` : "";
    return `adminApi() has no routes: no sluice middleware of this app uses key_prefix "${this.prefix}"${where}, and its config names none`;
  }

  private unserved(route: string): string {
    const here = this.routes;
    if (here.size > 0)
      return `no middleware of this app serves route "${route}" (they serve ${quoted(here.keys())}): name them "${route}", as in rateLimit({ name: "${route}", … })`;
    const others = this.served.keyPrefixes;
    return `no middleware of this app serves route "${route}" under key_prefix "${this.prefix}" (they use key_prefix ${quoted(others)}): give adminApi() the key_prefix they have`;
  }
}
