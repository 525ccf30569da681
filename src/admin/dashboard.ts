import { Hono } from "hono";
import type { Config } from "../config/index.js";
import { minuteOf } from "../metrics/index.js";
import type { Stores } from "../region/index.js";
import { metricsKeys } from "../store/layout.js";
import { asHash } from "../store/replies.js";
import { tokenMatches } from "./auth.js";
import type { AdminEnv } from "./context.js";
import { signedIn, startSession, throttledCompare } from "./guard.js";
import { DASHBOARD_PAGE, LOGIN_PAGE } from "./page.js";
import type { AuthThrottle } from "./throttle.js";
import { loginForm } from "./validate.js";

/**
 * The dashboard, mounted at `/__sluice/`: `GET /` the page (the login form until signed in),
 * `POST /login` the form's target (the token, throttled like a bearer token, for a session
 * cookie), and `GET /api/dashboard` the figures the page draws (behind the guard).
 */
export function dashboardApp(throttle: AuthThrottle): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();

  app.get("/", async (c) => {
    // the guard lets this page through with or without a session: it shows the form without one
    const token = c.env.SLUICE_ADMIN_TOKEN as string;
    return c.html((await signedIn(c, token)) ? DASHBOARD_PAGE : LOGIN_PAGE, 200, { "cache-control": "no-store" });
  });

  app.post("/login", loginForm, async (c) => {
    const token = c.env.SLUICE_ADMIN_TOKEN as string;
    const { token: given } = c.req.valid("form");
    if (!(await throttledCompare(c, throttle, () => tokenMatches(`Bearer ${given}`, token))))
      return c.html(LOGIN_PAGE, 401);
    await startSession(c, token);
    return c.redirect("/__sluice/", 303);
  });

  app.get("/api/dashboard", async (c) => c.json(await dashboardData(c.get("config"), c.get("stores"))));
  return app;
}

/**
 * Decisions the chart counts as allowed; every other decision is shed. `fallback`, `queued` and
 * `diverted` are shed although the client got an answer: the chart shows what the limits let
 * through, and those are requests a limit refused, whoever answered them in the origin's place.
 */
const ALLOWED = new Set(["allow", "shadow", "degraded", "replay"]);

export interface DashboardData {
  minutes: number[];
  routes: Array<{ route: string; allowed: number[]; shed: number[] }>;
  top_blocked: Array<{ route: string; id: string; refusals: number }>;
}

/**
 * The last 60 minutes per route (allowed vs shed, from the per-minute metrics) and the most
 * refused identifiers (hashed), read in one pipeline from the home region's Redis.
 */
export async function dashboardData(config: Config, stores: Stores): Promise<DashboardData> {
  const now = minuteOf(Date.now());
  const minutes = Array.from({ length: 60 }, (_, i) => now - 59 + i);
  const routes = config.routes.map((r) => ({
    route: r.name,
    allowed: minutes.map(() => 0),
    shed: minutes.map(() => 0),
  }));
  const store = stores.offPath();
  if (!store) return { minutes, routes, top_blocked: [] };
  const p = store.redis.pipeline();
  for (const m of minutes) p.hgetall(metricsKeys(config.key_prefix, m).minute);
  for (const m of minutes) p.zrange(metricsKeys(config.key_prefix, m).blocked, 0, 19, { rev: true, withScores: true });
  const replies = (await p.exec()) as unknown[];
  replies.slice(0, 60).forEach((reply, i) => chartMinute(routes, i, reply));
  return { minutes, routes, top_blocked: topBlocked(replies.slice(60)) };
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

/** The ten identifiers refused most over the hour, from each minute's top 20 (`route|id` → refusals). */
function topBlocked(replies: unknown[]): DashboardData["top_blocked"] {
  const blocked = new Map<string, number>();
  for (const reply of replies) {
    const flat = (reply ?? []) as Array<string | number>;
    for (let j = 0; j + 1 < flat.length; j += 2)
      blocked.set(String(flat[j]), (blocked.get(String(flat[j])) ?? 0) + Number(flat[j + 1]));
  }
  return [...blocked.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 10)
    .map(([member, refusals]) => ({ route: member.split("|")[0] ?? "", id: member.split("|")[1] ?? "", refusals }));
}
