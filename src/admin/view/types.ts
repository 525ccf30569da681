/**
 * What the dashboard's panels draw. `DashboardView` is the contract of `GET /__sluice/api/dashboard`
 * (src/admin/dashboard.ts builds it): the optional fields are drawn when present, and a panel
 * says "no figures" where they are not.
 */
export interface DashboardView {
  /** The 60 minutes of the charts (epoch ms / 60 000), oldest first. */
  minutes: number[];
  routes: RouteView[];
  regions?: RegionView[];
  top_blocked: BlockedView[];
}

export interface RouteView {
  route: string;
  /** Per minute of `minutes`. */
  allowed: number[];
  shed: number[];
  /** Each limit's decisions over the hour. */
  limits?: Array<{ limit: string; allowed: number; shed: number }>;
  /** Bans the route's limits gave in the last hour. */
  bans?: number;
  adaptive?: Array<{ region: string; limit: number; latency_ms: number | null; base_ms: number }>;
}

export interface RegionView {
  region: string;
  /** Decisions per second by verdict (`allow`, `reject`, ...). */
  per_second: Record<string, number>;
  rtt_p50_ms: number | null;
  rtt_p99_ms: number | null;
  /** 0..1: decisions taken from a local lease rather than a Redis round trip. */
  local_share: number;
  degraded_seconds: number;
}

export interface BlockedView {
  route: string;
  /** The bucket's hash. */
  id: string;
  refusals: number;
  /** A readable name (the IP, its /24, the ends of an API key, a JWT subject). */
  label?: string;
  /** The deny-list entry that names the client (`203.0.113.9`, `header:x-api-key=k1`). */
  entry?: string;
}

/** A deny or allow entry in force, as `GET /__sluice/lists` shows it. */
export interface ListRow {
  kind: "deny" | "allow";
  entry: string;
  expires_at: string;
  routes?: string[];
  note?: string;
}

/** An override in force, as `GET /__sluice/overrides` shows it. */
export interface OverrideRow {
  route: string;
  field: string;
  rate: number;
  burst: number;
  period_ms: number;
  expires_at: string;
}

/** One region's Redis, as the health check reports it. */
export interface HealthRow {
  region: string;
  reachable: boolean;
  rtt_ms?: number;
}

/** Everything the refreshed part of the page draws. */
export interface PanelsData {
  dashboard: DashboardView;
  lists: ListRow[];
  overrides: OverrideRow[];
  health: HealthRow[];
  /** What could not be read (the home Redis unreachable, say): those panels are drawn empty. */
  unavailable?: string[];
}

/** The route/limit pairs the override form offers. */
export type LimitChoice = { route: string; limit: string };
