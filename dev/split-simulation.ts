import { equalShare, splitShares, type Share } from "../src/region/shares.js";

/**
 * A deterministic simulation of a `split` limit across regions, on a simulated clock: each
 * region's bucket follows decide.lua's arithmetic (integer units, rescaled and clamped when its
 * share changes), each region records its attempts, and a rebalancer recomputes shares with the
 * production `splitShares` every interval. Used by the split tests and by `npm run bench`
 * (section 4), so it lives here, below both.
 */
export interface SplitScenario {
  rate: number;
  burst: number;
  /** Offered requests per second, per region. */
  demand: Record<string, number>;
  seconds: number;
  /** How often the rebalancer runs (ms); `0` means never (the static equal split). */
  rebalanceMs: number;
  /** From this second on, these regions cannot be reached by the rebalancer. */
  cutOff?: { region: string; fromSecond: number; demand?: number };
  /** From this second on, this region offers `demand` a second (a client hammering refusals there). */
  surge?: { region: string; fromSecond: number; demand: number };
}

export interface SplitResult {
  /** Admitted requests per whole second, all regions together. */
  perSecond: number[];
  /** Admitted requests per region over the whole run. */
  admittedByRegion: Record<string, number>;
  /** Admitted requests per region per whole second. */
  perSecondByRegion: Record<string, number[]>;
  /** The most admitted in any window of one second (sliding, 10 ms steps). */
  worstSecond: number;
  /** Shares of the cut-off region over time (to check it never grows). */
  cutOffShares: Share[];
}

const US = 1_000_000;

class Bucket {
  private tokens = -1;
  private unit = 1;
  private last = 0;

  constructor(public share: Share) {}

  take(now: number): boolean {
    const { rate, burst } = this.share;
    if (rate <= 0 || burst <= 0) return false;
    const g = gcd(US, rate);
    const unit = US / g;
    const refill = rate / g;
    const cap = burst * unit;
    if (this.tokens < 0) this.tokens = cap;
    else {
      if (this.unit !== unit) this.tokens = Math.floor(this.tokens / this.unit) * unit;
      this.tokens = Math.min(cap, this.tokens + Math.max(0, now - this.last) * refill);
    }
    this.unit = unit;
    this.last = now;
    if (this.tokens < unit) return false;
    this.tokens -= unit;
    return true;
  }
}

export function simulateSplit(s: SplitScenario): SplitResult {
  const regions = Object.keys(s.demand);
  const start = equalShare(s.rate, s.burst, regions.length);
  const buckets = Object.fromEntries(regions.map((r) => [r, new Bucket({ ...start })]));
  const attempts = Object.fromEntries(regions.map((r) => [r, 0]));
  const admitTimes: number[] = [];
  const perSecondByRegion = Object.fromEntries(regions.map((r) => [r, Array.from({ length: s.seconds }, () => 0)]));
  const cutOffShares: Share[] = [];

  const events = arrivals(s, regions);
  let nextRebalance = s.rebalanceMs > 0 ? s.rebalanceMs * 1000 : Infinity;
  for (const e of events) {
    while (e.t >= nextRebalance) {
      rebalance(nextRebalance);
      nextRebalance += s.rebalanceMs * 1000;
    }
    attempts[e.region] = (attempts[e.region] as number) + 1;
    if ((buckets[e.region] as Bucket).take(e.t)) {
      (perSecondByRegion[e.region] as number[])[Math.floor(e.t / US)]! += 1;
      admitTimes.push(e.t);
    }
  }

  function rebalance(now: number): void {
    const cut = s.cutOff && now >= s.cutOff.fromSecond * US ? s.cutOff.region : undefined;
    const frozen = cut ? { [cut]: (buckets[cut] as Bucket).share } : {};
    // the attempts were counted over one interval: that many periods (of 1 s) of the rate
    const periods = s.rebalanceMs / 1000;
    const shares = splitShares({ rate: s.rate, burst: s.burst, regions, demand: { ...attempts }, periods, frozen });
    for (const r of regions) if (r !== cut) (buckets[r] as Bucket).share = shares[r] as Share;
    if (s.cutOff) cutOffShares.push({ ...(buckets[s.cutOff.region] as Bucket).share });
    for (const r of regions) attempts[r] = 0;
  }

  const { perSecond, admittedByRegion } = tally(perSecondByRegion, s.seconds);
  const worst = worstSecond(admitTimes, s.seconds);
  return { perSecond, admittedByRegion, perSecondByRegion, worstSecond: worst, cutOffShares };
}

/** Admissions per second, all regions together, and per region over the run. */
function tally(
  perSecondByRegion: Record<string, number[]>,
  seconds: number,
): Pick<SplitResult, "perSecond" | "admittedByRegion"> {
  const perSecond = Array.from({ length: seconds }, (_, i) =>
    Object.values(perSecondByRegion).reduce((a, counts) => a + (counts[i] as number), 0),
  );
  const admittedByRegion = Object.fromEntries(
    Object.entries(perSecondByRegion).map(([r, counts]) => [r, counts.reduce((a, b) => a + b, 0)]),
  );
  return { perSecond, admittedByRegion };
}

/** Each region's requests evenly spaced, offset so regions do not move in lockstep, in time order. */
function arrivals(s: SplitScenario, regions: string[]): Array<{ t: number; region: string }> {
  const events: Array<{ t: number; region: string }> = [];
  regions.forEach((region, i) => {
    for (let sec = 0; sec < s.seconds; sec++) {
      const perSecond = offered(s, region, sec);
      for (let k = 0; k < perSecond; k++)
        events.push({ t: sec * US + Math.floor(((k + (i + 1) / (regions.length + 1)) * US) / perSecond), region });
    }
  });
  return events.sort((a, b) => a.t - b.t);
}

/** What a region offers in second `sec`: its demand, or what a cut-off or a surge makes it from then on. */
function offered(s: SplitScenario, region: string, sec: number): number {
  if (s.surge?.region === region && sec >= s.surge.fromSecond) return s.surge.demand;
  const cut = s.cutOff?.region === region && sec >= s.cutOff.fromSecond;
  return cut && s.cutOff?.demand !== undefined ? s.cutOff.demand : (s.demand[region] as number);
}

/** The most admissions in any window of one second, sliding in 10 ms steps. */
function worstSecond(admitTimes: number[], seconds: number): number {
  let worst = 0;
  for (let lo = 0, hi = 0, from = 0; from + US <= seconds * US; from += 10_000) {
    while (hi < admitTimes.length && (admitTimes[hi] as number) < from + US) hi++;
    while (lo < admitTimes.length && (admitTimes[lo] as number) < from) lo++;
    worst = Math.max(worst, hi - lo);
  }
  return worst;
}

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}
