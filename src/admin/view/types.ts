/**
 * What the dashboard's panels draw. `DashboardView` is the contract of `GET /__sluice/api/dashboard`
 * (src/admin/dashboard.ts builds it): the optional fields are drawn when present, and a panel
 * says "no figures" where they are not.
 */
import type { DashboardData } from "../dashboard-data.js";
import type { ListRow } from "../../features/access/admin.js";
import type { OverrideRow } from "../../features/rate-limit/admin-overrides.js";
import type { RouteRow } from "../../features/access/mode/admin.js";

/** The rows of the lists, overrides and route-mode tables, as the capabilities' admin routes answer them. */
export type { ListRow, OverrideRow, RouteRow };

/**
 * `GET /__sluice/api/dashboard`'s figures as the panels take them: `DashboardData` (built by
 * src/admin/dashboard.ts, documented in src/admin/dashboard-data.ts), with the per-limit figures and regions optional so
 * that a panel says "no figures" where they are missing.
 */
export interface DashboardView {
  notices?: string[];
  minutes: number[];
  routes: RouteView[];
  regions?: RegionView[];
  top_blocked: BlockedView[];
  idempotency?: IdempotencyView[];
  mcp?: McpView[];
  queues?: QueueView[];
}

type RouteData = DashboardData["routes"][number];
export type RouteView = Omit<RouteData, "limits" | "bans"> & Partial<Pick<RouteData, "limits" | "bans">>;
export type RegionView = Omit<DashboardData["regions"][number], "window_minutes"> &
  Partial<Pick<DashboardData["regions"][number], "window_minutes">>;
export type BlockedView = DashboardData["top_blocked"][number];
export type IdempotencyView = DashboardData["idempotency"][number];
export type McpView = DashboardData["mcp"][number];
export type McpToolView = McpView["tools"][number];
export type QueueView = DashboardData["queues"][number];

/** One region's Redis, as the health check reports it. */
export interface HealthRow {
  region: string;
  reachable: boolean;
  rtt_ms?: number;
  /** Where its scripts take their clock from: "isolate" where it refuses TIME in scripts. */
  clock?: { mode: string };
}

/** Everything the refreshed part of the page draws. */
export interface PanelsData {
  dashboard: DashboardView;
  lists: ListRow[];
  overrides: OverrideRow[];
  /** Every route and its degrade switch (`GET /__sluice/routes`); the table is left out without it. */
  modes?: RouteRow[];
  health: HealthRow[];
  /** What could not be read (the home Redis unreachable, say): those panels are drawn empty. */
  unavailable?: string[];
}

/** The route/limit pairs the override form offers. */
export type LimitChoice = { route: string; limit: string };
