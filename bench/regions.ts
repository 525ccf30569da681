/**
 * What a `global` limit costs a request decided in another region, when the home region's Redis
 * is far away: two private Redis stacks (home "us" and "eu", each redis-server + bridge), one
 * Worker with both sets of secrets, requests entering in Frankfurt (EU). The route `/r` has a
 * `region` limit (decided in eu's Redis), `/g` a `global` one (decided in the home Redis). The
 * home bridge delays each answer by 0 ms, then 50 ms (`setLatency`), playing an ocean between.
 * The Worker reaches each bridge through a tap (`tap.ts`), so the HTTP requests that carry the
 * decision are told apart from the Worker's background ones (metrics flush and lists refresh,
 * both in the home region).
 */
import type { Miniflare } from "miniflare";
import type { SluiceInput } from "../src/config/schema.js";
import { hit, Outcomes, type Place } from "./request.js";
import { type BenchStack, type Cleanup, startRedisBridge, TOKEN } from "./stack.js";
import { type IpSource, round, type Summary, summarise } from "./stats.js";
import { emptyTapCounts, startTap, type Tap, type TapCounts, tapDelta } from "./tap.js";

export const PATH_REGION = "/r";
export const PATH_GLOBAL = "/g";
const FROM_EU: Place = { continent: "EU", colo: "FRA" };
const EXPECTED_REGION = "eu";

/** Huge limits (every request allowed); a generous timeout so a slow moment never turns into `degraded`. */
export const REGIONS: SluiceInput = {
  key_prefix: "bench-regions",
  timeout_ms: 1_000,
  on_store_error: "open",
  home_region: "us",
  regions: { us: { continents: ["NA"] }, eu: { continents: ["EU"] } },
  routes: [
    // lease = false: this section measures what one central decision costs from afar (section 8
    // measures what leases save); with leases the global bucket would be decided mostly locally
    { name: "r", match: PATH_REGION, limits: [{ name: "l", rate: 1_000_000, period: "1s", lease: false }] },
    {
      name: "g",
      match: PATH_GLOBAL,
      limits: [{ name: "l", key: "global", rate: 1_000_000, period: "1s", scope: "global", lease: false }],
    },
  ],
};

export interface RegionsOptions {
  /** Latencies injected in the home bridge, ms. */
  latencies: number[];
  warmup: number;
  requests: number;
  block: number;
}

export interface RouteLatency {
  key: "region" | "global";
  label: string;
  path: string;
  latency: Summary;
  /** HTTP requests carrying the script call per decision, per Redis: where the limit was decided, and in how many round trips. */
  home_requests_per_decision: number;
  eu_requests_per_decision: number;
  /** The Worker's other HTTP requests while this route was measured (metrics flush, lists refresh), per Redis, with their commands. */
  home_other_requests: number;
  eu_other_requests: number;
  other_commands: Record<string, number>;
  unexpected_outcomes: Record<string, number>;
}

export interface LatencyStep {
  injected_ms: number;
  routes: RouteLatency[];
  /** global − region, at this latency. */
  added_median_ms: number;
  added_p99_ms: number;
}

export interface RegionsResult {
  options: RegionsOptions;
  from: Place;
  steps: LatencyStep[];
  problems: string[];
}

export async function measureRegions(
  stack: BenchStack,
  cleanup: Cleanup,
  ips: IpSource,
  opts: RegionsOptions,
): Promise<RegionsResult> {
  const [home, eu] = await Promise.all([startRedisBridge(cleanup, "home (us)"), startRedisBridge(cleanup, "eu")]);
  const [homeTap, euTap] = await Promise.all([
    startTap(home.bridge.url, cleanup, "home (us)"),
    startTap(eu.bridge.url, cleanup, "eu"),
  ]);
  const mf = await stack.worker(REGIONS, {
    UPSTASH_REDIS_REST_URL: homeTap.url,
    UPSTASH_REDIS_REST_TOKEN: TOKEN,
    UPSTASH_REDIS_REST_URL_EU: euTap.url,
    UPSTASH_REDIS_REST_TOKEN_EU: TOKEN,
  });
  const problems: string[] = [];
  const steps: LatencyStep[] = [];
  try {
    for (const injected of opts.latencies) {
      home.bridge.setLatency(injected);
      steps.push(await step(mf, homeTap, euTap, ips, opts, injected));
    }
  } finally {
    home.bridge.setLatency(0);
  }

  for (const s of steps) {
    for (const r of s.routes) {
      const label = `regions ${r.label} at +${s.injected_ms} ms`;
      if (Object.keys(r.unexpected_outcomes).length > 0)
        problems.push(
          `${label}: unexpected outcomes (want 200 allow from region ${EXPECTED_REGION}) ${JSON.stringify(r.unexpected_outcomes)}`,
        );
      const [wantHome, wantEu] = r.key === "global" ? [1, 0] : [0, 1];
      if (r.home_requests_per_decision !== wantHome || r.eu_requests_per_decision !== wantEu) {
        problems.push(
          `${label}: ${r.home_requests_per_decision} HTTP requests carrying the script to the home Redis and ${r.eu_requests_per_decision} to eu's per decision (want ${wantHome} and ${wantEu})`,
        );
      }
    }
  }
  return { options: opts, from: FROM_EU, steps, problems };
}

const ROUTES = [
  { key: "region" as const, label: "/r scope region", path: PATH_REGION },
  { key: "global" as const, label: "/g scope global", path: PATH_GLOBAL },
];

async function step(
  mf: Miniflare,
  home: Tap,
  eu: Tap,
  ips: IpSource,
  opts: RegionsOptions,
  injected: number,
): Promise<LatencyStep> {
  const routes = ROUTES;
  for (const r of routes) for (let i = 0; i < opts.warmup; i++) await hit(mf, r.path, ips.take(), FROM_EU);
  const samples = routes.map(() => [] as number[]);
  const outcomes = routes.map(() => new Outcomes("allow", EXPECTED_REGION));
  const empty = emptyTapCounts;
  const homeCounts = routes.map(empty);
  const euCounts = routes.map(empty);
  for (let done = 0; done < opts.requests; done += opts.block) {
    const size = Math.min(opts.block, opts.requests - done);
    for (const [ri, r] of routes.entries()) {
      const homeBefore = home.counts();
      const euBefore = eu.counts();
      for (let i = 0; i < size; i++) {
        const h = await hit(mf, r.path, ips.take(), FROM_EU);
        samples[ri]?.push(h.ms);
        outcomes[ri]?.record(h);
      }
      add(homeCounts[ri] as TapCounts, tapDelta(homeBefore, home.counts()));
      add(euCounts[ri] as TapCounts, tapDelta(euBefore, eu.counts()));
    }
  }
  const results: RouteLatency[] = routes.map((r, ri) => ({
    key: r.key,
    label: r.label,
    path: r.path,
    latency: summarise(samples[ri] ?? []),
    ...requestFigures(homeCounts[ri] as TapCounts, euCounts[ri] as TapCounts, opts.requests),
    unexpected_outcomes: outcomes[ri]?.unexpected ?? {},
  }));
  const [region, global] = results as [RouteLatency, RouteLatency];
  return {
    injected_ms: injected,
    routes: results,
    added_median_ms: round(global.latency.median_ms - region.latency.median_ms),
    added_p99_ms: round(global.latency.p99_ms - region.latency.p99_ms),
  };
}

/** Adds one block's tap counts to a route's sum. */
function add(sum: TapCounts, d: TapCounts): void {
  sum.decision += d.decision;
  sum.other += d.other;
  sum.unreadable += d.unreadable;
  for (const [c, n] of Object.entries(d.otherCommands)) sum.otherCommands[c] = (sum.otherCommands[c] ?? 0) + n;
}

/** A route's requests to each Redis: those carrying the script per decision, and the rest by command. */
function requestFigures(h: TapCounts, e: TapCounts, requests: number) {
  const other: Record<string, number> = { ...h.otherCommands };
  for (const [c, n] of Object.entries(e.otherCommands)) other[c] = (other[c] ?? 0) + n;
  return {
    home_requests_per_decision: round(h.decision / requests),
    eu_requests_per_decision: round(e.decision / requests),
    home_other_requests: h.other,
    eu_other_requests: e.other,
    other_commands: other,
  };
}
