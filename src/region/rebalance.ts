import type { Config, Limit } from "../config/index.js";
import { rebalanceLockKey, shareKeys, shareRecordKey } from "../store/layout.js";
import type { Store } from "../store/redis.js";
import { allRegions, type Stores } from "./index.js";
import { splitShares, type Share } from "./shares.js";
import { logError, settleQuietly } from "../util/log.js";

/** Rebalancing runs off the request path: it may take longer than a decision's budget. */
const REBALANCE_TIMEOUT_MS = 2_000;
/** Shares outlive a long partition: a cut-off region keeps its last share rather than growing back to an equal split. */
const SHARE_TTL_S = 7 * 24 * 3600;
/** The field of a limit's share record that holds when it was last rebalanced (ms): never a region's name, which starts with a letter or digit. */
const RAN_AT = "@ran_at";
/** The demand counters expire an hour after they start (decide.lua): no window is longer. */
const DEMAND_TTL_MS = 3_600_000;

export interface RebalanceReport {
  ran: boolean;
  /** Per `route/limit`: the shares written, and the regions that could not be reached (kept their share). */
  limits: Record<string, { shares: Record<string, Share>; unreachable: string[] }>;
}

/**
 * Recomputes the regional shares of every `split` limit from the demand each region recorded
 * since the last run, and writes each region its share. Guarded by a lock in the home region's
 * Redis so that only one isolate in the world runs it per interval; a region whose Redis cannot
 * be reached keeps its last share (the others split what is left), and the home region keeps a
 * record of every share so the next run knows what an unreachable region still holds.
 *
 * @example ctx.waitUntil(rebalance(config, stores)) // from the cron trigger, or nudged by a request
 */
export async function rebalance(config: Config, stores: Stores): Promise<RebalanceReport> {
  const report: RebalanceReport = { ran: false, limits: {} };
  const split = config.routes.flatMap((route) =>
    route.limits.filter((l) => l.scope === "split").map((limit) => ({ route, limit })),
  );
  if (split.length === 0) return report;
  const home = stores.fixed(REBALANCE_TIMEOUT_MS);
  if (!home) return report;
  const locked = await home.keys.set(rebalanceLockKey(config.key_prefix), String(Date.now()), {
    nx: true,
    px: Math.max(1_000, config.rebalance_every - 100),
  });
  if (!locked) return report;
  report.ran = true;
  const regions = allRegions(config);
  const byRegion = new Map(regions.map((r) => [r, stores.fixed(REBALANCE_TIMEOUT_MS, r) as Store]));
  for (const { route, limit } of split) {
    report.limits[`${route.name}/${limit.name}`] = await rebalanceLimit(
      { prefix: config.key_prefix, route: route.name, everyMs: config.rebalance_every },
      limit,
      home,
      byRegion,
    );
  }
  return report;
}

/** One split limit: the regions' demand read (and reset), shares computed and written, the record kept. */
async function rebalanceLimit(
  { prefix, route, everyMs }: { prefix: string; route: string; everyMs: number },
  limit: Pick<Limit, "name" | "rate" | "burst" | "period">,
  home: Store,
  byRegion: Map<string, Store>,
): Promise<RebalanceReport["limits"][string]> {
  const regions = [...byRegion.keys()];
  const recordKey = shareRecordKey(prefix, route, limit.name);
  const keysOf = (region: string) => shareKeys(prefix, route, limit.name, region);
  const now = Date.now();
  const { demand, frozen, ranAt } = await demandOf(home, recordKey, limit, byRegion, (r) => keysOf(r).demandKey);
  // the demand was counted since the last run (an interval when unknown): in periods, to weigh it against the rate
  const windowMs = Math.min(Math.max(ranAt !== undefined ? now - ranAt : everyMs, 1), DEMAND_TTL_MS);
  const periods = windowMs / limit.period;
  const shares = splitShares({ rate: limit.rate, burst: limit.burst, regions, demand, periods, frozen });
  const failedWrites: string[] = [];
  const write = (r: string) =>
    (byRegion.get(r) as Store).keys
      .set(keysOf(r).shareKey, formatShare(shares[r] as Share), { ex: SHARE_TTL_S })
      .catch(() => failedWrites.push(r));
  await Promise.all(regions.filter((r) => !(r in frozen)).map(write));
  // the record says what each region holds now: a region whose write failed still holds its old share
  const record = Object.fromEntries([
    ...regions.filter((r) => !failedWrites.includes(r)).map((r) => [r, formatShare(shares[r] as Share)]),
    [RAN_AT, String(now)],
  ]);
  await home.hash
    .set(recordKey, record)
    .then(() => home.keys.expire(recordKey, SHARE_TTL_S))
    .catch((e: unknown) => logError("rebalance_record_failed", e, { route, limit: limit.name }));
  return { shares, unreachable: [...Object.keys(frozen), ...failedWrites] };
}

/**
 * Each region's demand since the last run (read and reset with GETDEL); a region that cannot be
 * reached is frozen at the share the record says it holds (an equal split when there is none).
 * The record also says when the limit was last rebalanced (none: unknown).
 */
async function demandOf(
  home: Store,
  recordKey: string,
  limit: Pick<Limit, "rate" | "burst">,
  byRegion: Map<string, Store>,
  demandKey: (region: string) => string,
): Promise<{ demand: Record<string, number>; frozen: Record<string, Share>; ranAt?: number }> {
  const regions = [...byRegion.keys()];
  const [record, ...demands] = await Promise.all([
    home.hash.getAll(recordKey).catch((): Record<string, string> => ({})),
    ...regions.map((r) =>
      (byRegion.get(r) as Store).keys.getdel(demandKey(r)).then(
        (v) => Number(v ?? 0),
        () => undefined,
      ),
    ),
  ]);
  const demand: Record<string, number> = {};
  const frozen: Record<string, Share> = {};
  const equal = { rate: Math.floor(limit.rate / regions.length), burst: Math.floor(limit.burst / regions.length) };
  regions.forEach((r, i) => {
    const d = demands[i];
    if (d !== undefined) demand[r] = d;
    else frozen[r] = parseShare(record[r]) ?? equal;
  });
  const ranAt = Number(record[RAN_AT]);
  return { demand, frozen, ...(Number.isFinite(ranAt) && ranAt > 0 ? { ranAt } : {}) };
}

/**
 * Starts a rebalance from a request, at most once per interval per isolate (the Redis lock makes
 * it once per interval in the world); the cron trigger is the floor when traffic is quiet.
 */
export class RebalanceClock {
  private lastNudge = 0;

  nudge(config: Config, stores: Stores, now: number, defer: (work: Promise<unknown>) => void): void {
    // a fresh isolate waits one interval first: it has seen no demand yet, and the cron covers it
    if (this.lastNudge === 0) this.lastNudge = now;
    if (now - this.lastNudge < config.rebalance_every) return;
    this.lastNudge = now;
    defer(settleQuietly(rebalance(config, stores), "rebalance_error"));
  }
}

function parseShare(text: string | undefined): Share | undefined {
  const m = /^(\d+):(\d+)$/.exec(text ?? "");
  return m ? { rate: Number(m[1]), burst: Number(m[2]) } : undefined;
}

function formatShare(s: Share): string {
  return `${s.rate}:${s.burst}`;
}
