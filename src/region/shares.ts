/** One region's part of a split limit: its own integer rate and burst. */
export interface Share {
  rate: number;
  burst: number;
}

export interface ShareInput {
  /** The global figures the shares must never exceed in sum. */
  rate: number;
  burst: number;
  /** Every region of the deployment, in a stable order. */
  regions: readonly string[];
  /** Tokens demanded per region over the last window (attempts × cost, refused ones included). */
  demand: Readonly<Record<string, number>>;
  /** How many of the limit's periods that window lasted (default 1): it puts `demand` in `rate`'s units. */
  periods?: number;
  /** Regions that could not be reached: they keep these shares, and the rest is split among the others. */
  frozen?: Readonly<Record<string, Share>>;
  /** Share of the global rate every reachable region keeps even when idle (default 2%). */
  floorFraction?: number;
}

/**
 * Splits a global rate and burst among regions by their demand (see {@link demandWeights}: in
 * proportion while the world could admit what it asked, max-min fair past it, so that one
 * region's hammering cannot take what another needs), with a floor so an idle region can still
 * admit its first requests. Shares are whole tokens; the leftovers of
 * rounding go to the regions with the largest remainders, so nothing of the global figure is
 * wasted and nothing exceeds it: the sum of rates is at most `rate`, the sum of bursts at most
 * `burst`, whatever the demand. A frozen (unreachable) region keeps its share and is never
 * given more.
 *
 * @example
 * splitShares({ rate: 400, burst: 40, regions: ["a", "b", "c", "d"], demand: { a: 240, b: 120, c: 30, d: 10 } })
 * // { a: { rate: 240, burst: 24 }, b: { rate: 120, burst: 12 }, c: { rate: 30, burst: 3 }, d: { rate: 10, burst: 1 } }
 */
export function splitShares(input: ShareInput): Record<string, Share> {
  const frozen = input.frozen ?? {};
  const live = input.regions.filter((r) => !(r in frozen));
  const out: Record<string, Share> = {};
  for (const r of input.regions) if (r in frozen) out[r] = { ...(frozen[r] as Share) };
  if (live.length === 0) return out;

  const frozenRate = sum(Object.values(frozen).map((s) => s.rate));
  const frozenBurst = sum(Object.values(frozen).map((s) => s.burst));
  const available = Math.max(0, input.rate - frozenRate);
  const weights = demandWeights(
    { rate: available, burst: Math.max(0, input.burst - frozenBurst) },
    live,
    input.demand,
    input.periods ?? 1,
  );
  const rates = apportion(available, live, weights, input.floorFraction ?? 0.02);
  // Burst follows the rate shares, so a region's burst is what its rate share is worth.
  const bursts = apportion(Math.max(0, input.burst - frozenBurst), live, rates, 0);
  for (const r of live) out[r] = { rate: rates[r] ?? 0, burst: bursts[r] ?? 0 };
  return out;
}

/**
 * What each region's demand weighs in the split. Demand counts refused attempts too (a starved
 * region must be seen asking, or it would look idle), so a region can make it as large as it
 * likes: in plain proportions, one client hammering refusals in one region took the world's share
 * there (5,000 attempts a second against neighbours asking 400 in all left them 7%).
 *
 * While the regions together ask for no more than they could have admitted in the window (the
 * rate over it, and the burst once), nobody was short for want of a share: the weights are the
 * demands, in proportion, as before. Past it, the world is short, and the weights are max-min
 * fair parts of the rate over the window (water-filling): a region asking for less than an equal
 * part of what the smaller ones leave gets all it asks, the regions asking for more share the
 * rest equally. So whatever one region's attempts, every other keeps what it asks up to its equal
 * part; attempts past that win nothing.
 */
function demandWeights(
  available: { rate: number; burst: number },
  names: readonly string[],
  demand: Readonly<Record<string, number>>,
  periods: number,
): Record<string, number> {
  const asked = new Map(names.map((n) => [n, Math.max(0, demand[n] ?? 0)]));
  const refill = available.rate * periods;
  if (sum([...asked.values()]) <= refill + available.burst) return Object.fromEntries(asked);
  return Object.fromEntries(maxMinFair(refill, asked));
}

/** Max-min fair parts of `available` for what each asks (water-filling): nobody gets more than it asks. */
function maxMinFair(available: number, asked: ReadonlyMap<string, number>): Map<string, number> {
  const fair = new Map<string, number>();
  const open = [...asked.keys()].sort((a, b) => (asked.get(a) as number) - (asked.get(b) as number));
  let left = available;
  while (open.length > 0) {
    const level = left / open.length;
    const smallest = asked.get(open[0] as string) as number;
    if (smallest > level) {
      for (const n of open) fair.set(n, level);
      break;
    }
    fair.set(open.shift() as string, smallest);
    left -= smallest;
  }
  return fair;
}

/** The equal split a region uses before the first rebalance reaches it. */
export function equalShare(rate: number, burst: number, regionCount: number): Share {
  return { rate: Math.floor(rate / regionCount), burst: Math.floor(burst / regionCount) };
}

/**
 * Whole-number apportionment of `total` among `names`, by weight, where nobody gets less than a
 * floor: shares are proportional to weight; a name whose share would fall under the floor gets the
 * floor and the rest is shared again among the others (so the floor costs the busy regions only
 * what the idle ones actually lack). Remainders go by the largest-remainder method. Sums to
 * exactly `total`.
 */
function apportion(
  total: number,
  names: readonly string[],
  weights: Readonly<Record<string, number>>,
  floorFraction: number,
): Record<string, number> {
  // at least one whole token each where there is enough to go round: a share of 0 admits nothing
  const floor = Math.min(Math.max(Math.floor(total * floorFraction), 1), Math.floor(total / names.length));
  const exact = new Map<string, number>();
  let open = [...names];
  let left = total;
  for (;;) {
    const w = open.map((n) => Math.max(0, weights[n] ?? 0));
    const wSum = sum(w);
    const share = (i: number) => (wSum > 0 ? (left * (w[i] as number)) / wSum : left / open.length);
    const under = open.filter((_, i) => share(i) < floor);
    if (under.length === 0 || under.length === open.length) {
      // (when everybody is under the floor there is not enough for floors: plain proportions)
      open.forEach((n, i) => exact.set(n, share(i)));
      break;
    }
    for (const n of under) exact.set(n, floor);
    left -= floor * under.length;
    open = open.filter((n) => !under.includes(n));
  }
  const values = names.map((n) => exact.get(n) as number);
  const whole = values.map(Math.floor);
  let rest = total - sum(whole);
  const byRemainder = names
    .map((_, i) => i)
    .sort(
      (a, b) => (values[b] as number) - (whole[b] as number) - ((values[a] as number) - (whole[a] as number)) || a - b,
    );
  for (const i of byRemainder) {
    if (rest <= 0) break;
    whole[i] = (whole[i] as number) + 1;
    rest--;
  }
  return Object.fromEntries(names.map((n, i) => [n, whole[i] as number]));
}

function sum(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}
