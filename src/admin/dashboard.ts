import { Hono } from "hono";
import type { Config } from "../config/index.js";
import { minuteOf } from "../metrics/index.js";
import { readMinutes } from "../metrics/reads.js";
import type { Stores } from "../region/index.js";
import { asHash } from "../store/replies.js";
import { tokenMatches } from "./auth.js";
import { adaptiveFigures, hourOfRoute, regionFigures, withLabels } from "./figures.js";
import type { DashboardData } from "./dashboard-data.js";
import { idempotencyRows } from "./idempotency-figures.js";
import { mcpRows } from "./mcp-figures.js";
import { queueRows } from "./queue-figures.js";
import { backlogRows } from "../features/shedding/queue/depth.js";
import { indeterminateWaiting } from "../features/guard/idempotency/reconcile-sweep.js";
import { orElse } from "../util/log.js";
import type { AdminEnv } from "../operator/context.js";
import type { ServedView } from "../operator/served.js";
import { signedIn, signOut, startSession, throttledCompare } from "./token-gate.js";
import { limitChoices, panelsData, routeChoices } from "./panels.js";
import type { AuthThrottle } from "./throttle.js";
import { loginForm } from "../operator/validate.js";
import { dashboardPage, loginPage, panelsFragment } from "./view/page.js";

const NO_STORE = { "cache-control": "no-store" };

/**
 * The dashboard, mounted at `/__sluice/`: `GET /` the page (the login form until signed in),
 * `POST /login` the form's target (the token, throttled like a bearer token, for a session
 * cookie), `POST /logout` the sign-out (ends the session server-side), `GET /fragments/panels` the
 * page's panels alone (which its script swaps in every few seconds), and `GET /api/dashboard` the
 * figures they draw as JSON (the last three behind the token gate).
 */
export function dashboardApp(throttle: AuthThrottle): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();

  app.get("/", async (c) => {
    // the token gate lets this page through with or without a session: it shows the form without one
    const token = c.env.SLUICE_ADMIN_TOKEN as string;
    if (!(await signedIn(c, token))) return c.html(loginPage(), 200, NO_STORE);
    const [config, stores, served] = [c.get("config"), c.get("stores"), c.get("served")];
    const data = await panelsData(config, stores, dashboardData(config, stores, served), served);
    return c.html(dashboardPage(data, limitChoices(config, served), routeChoices(config, served)), 200, NO_STORE);
  });

  app.get("/fragments/panels", async (c) => {
    const [config, stores, served] = [c.get("config"), c.get("stores"), c.get("served")];
    const data = await panelsData(config, stores, dashboardData(config, stores, served), served);
    return c.html(panelsFragment(data), 200, NO_STORE);
  });

  app.post("/login", loginForm, async (c) => {
    const token = c.env.SLUICE_ADMIN_TOKEN as string;
    const { token: given } = c.req.valid("form");
    if (!(await throttledCompare(c, throttle, () => tokenMatches(`Bearer ${given}`, token))))
      return c.html(loginPage(true), 401);
    await startSession(c, token);
    return c.redirect("/__sluice/", 303);
  });

  // behind the token gate: the session's cookie and a JSON body (what no cross-site form can send)
  app.post("/logout", async (c) => {
    const signedOut = await signOut(c, c.env.SLUICE_ADMIN_TOKEN as string);
    return c.json({ signed_out: signedOut }, 200, NO_STORE);
  });

  app.get("/api/dashboard", async (c) =>
    c.json(await dashboardData(c.get("config"), c.get("stores"), c.get("served"))),
  );
  return app;
}

/**
 * Decisions the chart counts as allowed; every other decision is shed. `fallback`, `queued` and
 * `diverted` are shed although the client got an answer: the chart shows what the limits let
 * through, and those are requests a limit refused, whoever answered them in the origin's place.
 */
const ALLOWED = new Set(["allow", "shadow", "degraded", "replay"]);

/**
 * The last 60 minutes per route (allowed vs shed, each limit's figures and bans, from the
 * per-minute metrics), each region's recent figures, and the most refused identifiers (hashed, with
 * their labels), read from the home region's Redis in two pipelines; adaptive limits from each
 * region's Redis, in parallel with them. With `served` (`adminApi()`), what the app's middleware
 * serve: a route of the config none serves is marked, and said in the notices.
 */
export async function dashboardData(config: Config, stores: Stores, served?: ServedView): Promise<DashboardData> {
  const nowMs = Date.now();
  const now = minuteOf(nowMs);
  const minutes = Array.from({ length: 60 }, (_, i) => now - 59 + i);
  const adaptive = adaptiveFigures(config, stores);
  const routes: DashboardData["routes"] = config.routes.map((r) => ({
    route: r.name,
    allowed: minutes.map(() => 0),
    shed: minutes.map(() => 0),
    limits: [],
    bans: 0,
  }));
  const store = stores.offPath();
  const backlogs = store
    ? orElse(backlogRows(store, config, nowMs), undefined, "queue_backlog_read_failed")
    : Promise.resolve(undefined);
  const waiting = store
    ? orElse(indeterminateWaiting(store, config), undefined, "indeterminate_read_failed")
    : Promise.resolve(undefined);
  const read = store ? await readMinutes(store, config.key_prefix, minutes) : undefined;
  const hour = read?.counts ?? minutes.map(() => ({}));
  hour.forEach((counts, i) => chartMinute(routes, i, counts));
  const adaptiveByRoute = await adaptive;
  for (const r of routes) {
    Object.assign(r, hourOfRoute(r.route, hour, ALLOWED));
    const rows = adaptiveByRoute.get(r.route);
    if (rows) r.adaptive = rows;
  }
  for (const r of routes) {
    const gap = served?.gap(r.route);
    if (gap) r.unserved = gap.detail;
  }
  const top_blocked = await withLabels(config, stores, topBlocked(read?.blocked ?? [], minutes));
  return {
    notices: notices(config, hour, served),
    minutes,
    routes,
    regions: regionFigures(config, hour, nowMs),
    top_blocked,
    idempotency: idempotencyRows(config, hour, await waiting),
    mcp: mcpRows(config, hour),
    queues: queueRows(config, hour, await backlogs),
  };
}

/**
 * What the operator must know to read the page right: routes the config names that no middleware
 * of the app serves, and routes served or counted that the page does not show (decisions counted
 * in the hour under a route the configuration does not have: another Worker on this `key_prefix`,
 * or a route since renamed), and a page with no routes at all.
 */
function notices(
  config: Config,
  hour: ReadonlyArray<Record<string, string>>,
  served: ServedView | undefined,
): string[] {
  const out = served?.notices(config) ?? [];
  const shown = new Set(config.routes.map((r) => r.name));
  const counted = [...countedRoutes(hour)].filter((r) => !shown.has(r) && !served?.routes.has(r));
  for (const route of counted)
    out.push(
      `decisions were counted under route "${route}" in the last hour, which this admin API does not show: it has no route of that name`,
    );
  if (config.routes.length === 0 && !served) out.push("the configuration has no routes");
  return out;
}

/** The routes of the hour's decision counts (`route|limit|decision`), but `-`. */
function countedRoutes(hour: ReadonlyArray<Record<string, string>>): Set<string> {
  const routes = new Set<string>();
  for (const counts of hour)
    for (const field of Object.keys(counts)) {
      const parts = field.split("|");
      // "-": a deny-list refusal on a path no route matches, counted under no route
      if (parts.length === 3 && parts[0] && parts[0] !== "-") routes.add(parts[0]);
    }
  return routes;
}

/** Adds one minute's counts (`route|limit|decision` → n) to each route's allowed and shed series. */
function chartMinute(routes: DashboardData["routes"], i: number, reply: unknown): void {
  for (const [field, n] of Object.entries(asHash(reply))) {
    const [route, , decision] = field.split("|");
    const r = routes.find((x) => x.route === route);
    if (!r || !decision) continue;
    (ALLOWED.has(decision) ? r.allowed : r.shed)[i]! += Number(n);
  }
}

/**
 * The ten identifiers refused most over the hour, from each minute's top 20 (`route|id` → refusals),
 * each with the latest minute it was refused in (where its label is read).
 */
function topBlocked(
  replies: unknown[],
  minutes: number[],
): Array<DashboardData["top_blocked"][number] & { minute: number }> {
  const blocked = new Map<string, { refusals: number; minute: number }>();
  replies.forEach((reply, i) => {
    const flat = (reply ?? []) as Array<string | number>;
    for (let j = 0; j + 1 < flat.length; j += 2) {
      const seen = blocked.get(String(flat[j]));
      blocked.set(String(flat[j]), { refusals: (seen?.refusals ?? 0) + Number(flat[j + 1]), minute: minutes[i] ?? 0 });
    }
  });
  return [...blocked.entries()]
    .sort((a, b) => b[1].refusals - a[1].refusals)
    .slice(0, 10)
    .map(([member, { refusals, minute }]) => ({
      route: member.split("|")[0] ?? "",
      id: member.split("|")[1] ?? "",
      refusals,
      minute,
    }));
}
