/**
 * The four-region scenario of a `split` limit: a provider allows 400 requests/s in all (burst 40),
 * four regions offer 240, 120, 30 and 10 requests/s. The static equal split (100/s each) against
 * sluice's split, rebalanced every second and every 5 s (the default `rebalance_every`), and the
 * same with the smallest region cut off from the rebalancer at second 20 while its demand surges.
 *
 * Pure computation: `simulateSplit` (dev/split-simulation.ts) runs each region's bucket
 * with decide.lua's arithmetic on a simulated clock and rebalances with the production
 * `splitShares`, so the figures are exact and the same on every machine.
 */
import { simulateSplit, type SplitResult as SimulatedSplit, type SplitScenario } from "@sluice/dev";
import type { Share } from "../src/region/shares.js";
import { round } from "./stats.js";

export interface SplitOptions {
  rate: number;
  burst: number;
  /** Offered requests per second, per region (the order is the regions' order). */
  demand: Record<string, number>;
  seconds: number;
  /** The rebalance intervals of sluice's split to run (ms); the static split is always run too. */
  rebalanceMs: number[];
  /** The smallest region is cut off from the rebalancer from this second on, with this demand. */
  cutOff: { fromSecond: number; demand: number };
}

export const SPLIT_SCENARIO: SplitOptions = {
  rate: 400,
  burst: 40,
  demand: { us: 240, eu: 120, ap: 30, sa: 10 },
  seconds: 60,
  rebalanceMs: [1_000, 5_000],
  cutOff: { fromSecond: 20, demand: 300 },
};

export interface RegionFigures {
  region: string;
  /** Offered requests per second in the measured seconds. */
  offered_per_s: number;
  /** Admitted per second in the measured seconds. */
  admitted_per_s: number;
}

export interface SplitVariant {
  key: string;
  label: string;
  /** The label in the table. */
  short: string;
  /** 0 = never rebalanced (the static equal split). */
  rebalance_ms: number;
  /** The seconds the means are taken over: [from, to). */
  measured_seconds: { from: number; to: number };
  admitted_per_s: number;
  admitted_pct_of_rate: number;
  regions: RegionFigures[];
  /** The most admitted in any one-second window of the whole run (sliding, 10 ms steps). */
  worst_second: number;
  /** worst_second − rate (negative: never reached the rate). */
  overshoot: number;
  /** Admitted per whole second, all regions, over the whole run. */
  per_second: number[];
  cut_off?: {
    region: string;
    from_second: number;
    demand_per_s: number;
    /** The share the region held when it was cut off, and the largest it held afterwards. */
    share_at_cut: Share | null;
    max_share_after_cut: Share | null;
    admitted_per_s_after_cut: number;
  };
}

export interface SplitResult {
  scenario: SplitOptions;
  variants: SplitVariant[];
  problems: string[];
}

export function measureSplit(opts: SplitOptions = SPLIT_SCENARIO): SplitResult {
  const regions = Object.keys(opts.demand);
  const smallest = regions.reduce((a, b) => ((opts.demand[b] ?? 0) < (opts.demand[a] ?? 0) ? b : a));
  const problems: string[] = [];
  const variants: SplitVariant[] = [];
  const base = { rate: opts.rate, burst: opts.burst, demand: opts.demand, seconds: opts.seconds };
  const run = (scenario: SplitScenario, key: string, label: string, short: string, from: number) =>
    runVariant({ scenario, key, label, short, from }, regions, problems);

  for (const rebalanceMs of [0, ...opts.rebalanceMs]) {
    const label = rebalanceMs === 0 ? "static equal split" : `sluice split, rebalance every ${rebalanceMs / 1000} s`;
    const short = rebalanceMs === 0 ? "static equal split" : `sluice, rebalance ${rebalanceMs / 1000} s`;
    // After the first rebalance has taken effect: skip it and one more second (static: the first second, its burst).
    const from = Math.ceil(rebalanceMs / 1000) + 1;
    variants.push(
      run({ ...base, rebalanceMs }, `${rebalanceMs === 0 ? "static" : `sluice_${rebalanceMs}ms`}`, label, short, from),
    );
  }
  for (const rebalanceMs of opts.rebalanceMs) {
    const cutOff = { region: smallest, fromSecond: opts.cutOff.fromSecond, demand: opts.cutOff.demand };
    const label = `sluice split, rebalance every ${rebalanceMs / 1000} s, ${smallest} cut off from the rebalancer at ${cutOff.fromSecond} s with a surge to ${cutOff.demand}/s`;
    const short = `sluice, rebalance ${rebalanceMs / 1000} s, ${smallest} cut off`;
    variants.push(
      run({ ...base, rebalanceMs, cutOff }, `sluice_${rebalanceMs}ms_cut_off`, label, short, cutOff.fromSecond),
    );
  }
  return { scenario: opts, variants, problems };
}

interface VariantSpec {
  scenario: SplitScenario;
  key: string;
  label: string;
  short: string;
  /** The first second the means are taken from. */
  from: number;
}

/** One simulation, its means over [from, seconds) taken by subtracting a run that stops at `from`. */
function runVariant(spec: VariantSpec, regions: string[], problems: string[]): SplitVariant {
  const { scenario, key, label, short, from } = spec;
  const full = simulateSplit(scenario);
  // Deterministic and causal: a run of `from` seconds is exactly the first `from` seconds of the full one.
  const prefix = simulateSplit({ ...scenario, seconds: from });
  if (prefix.perSecond.some((n, i) => n !== full.perSecond[i]))
    problems.push(`split ${label}: the first ${from} s of the simulation differ between runs (means would be wrong)`);
  const span = scenario.seconds - from;
  const measured = full.perSecond.slice(from).reduce((a, b) => a + b, 0);
  const regionFigures = regions.map((region) => ({
    region,
    offered_per_s: round(offeredIn(scenario, region, from) / span, 1),
    admitted_per_s: round(((full.admittedByRegion[region] ?? 0) - (prefix.admittedByRegion[region] ?? 0)) / span, 1),
  }));
  const variant: SplitVariant = {
    key,
    label,
    short,
    rebalance_ms: scenario.rebalanceMs,
    measured_seconds: { from, to: scenario.seconds },
    admitted_per_s: round(measured / span, 1),
    admitted_pct_of_rate: round((100 * measured) / span / scenario.rate, 1),
    regions: regionFigures,
    worst_second: full.worstSecond,
    overshoot: full.worstSecond - scenario.rate,
    per_second: full.perSecond,
  };
  const ceiling = scenario.rate + scenario.burst;
  if (full.worstSecond > ceiling)
    problems.push(`split ${label}: ${full.worstSecond} admitted in one second, above rate + burst = ${ceiling}`);
  if (scenario.cutOff) variant.cut_off = cutOffFigures(spec, full, regionFigures, problems);
  return variant;
}

/** Requests a region offers in the seconds [from, scenario.seconds). */
function offeredIn(scenario: SplitScenario, region: string, from: number): number {
  const cut = scenario.cutOff?.region === region ? scenario.cutOff : undefined;
  const normal = scenario.demand[region] ?? 0;
  let total = 0;
  for (let s = from; s < scenario.seconds; s++)
    total += cut && s >= cut.fromSecond && cut.demand !== undefined ? cut.demand : normal;
  return total;
}

/** The cut-off region's share before and after the cut; a problem if it grew while unreachable. */
function cutOffFigures(
  { scenario, label }: VariantSpec,
  full: SimulatedSplit,
  regionFigures: RegionFigures[],
  problems: string[],
): NonNullable<SplitVariant["cut_off"]> {
  const cut = scenario.cutOff!;
  // cutOffShares has one entry per rebalance, the i-th at (i + 1) × rebalanceMs.
  const at = (i: number) => ((i + 1) * scenario.rebalanceMs) / 1000;
  const before = full.cutOffShares.filter((_, i) => at(i) < cut.fromSecond);
  const after = full.cutOffShares.filter((_, i) => at(i) >= cut.fromSecond);
  const shareAtCut = before[before.length - 1] ?? null;
  const maxAfter = after.reduce<Share | null>(
    (m, s) => (m === null || s.rate > m.rate || (s.rate === m.rate && s.burst > m.burst) ? s : m),
    null,
  );
  if (shareAtCut && maxAfter && (maxAfter.rate > shareAtCut.rate || maxAfter.burst > shareAtCut.burst)) {
    problems.push(
      `split ${label}: the cut-off region's share grew from ${shareAtCut.rate}/${shareAtCut.burst} to ${maxAfter.rate}/${maxAfter.burst} (rate/burst) while it could not be reached`,
    );
  }
  return {
    region: cut.region,
    from_second: cut.fromSecond,
    demand_per_s: cut.demand ?? scenario.demand[cut.region] ?? 0,
    share_at_cut: shareAtCut,
    max_share_after_cut: maxAfter,
    admitted_per_s_after_cut: regionFigures.find((r) => r.region === cut.region)?.admitted_per_s ?? Number.NaN,
  };
}
