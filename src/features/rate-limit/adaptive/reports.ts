import adaptiveLua from "../../../../lua/adaptive.lua";
import type { Route } from "../../../config/index.js";
import type { Defer } from "../../../util/defer.js";
import type { OverrideCopies } from "../decision/overrides.js";
import type { Bucket, LimitOutcome } from "../types.js";
import { asKeyHash, type KeyHash } from "../../../identity/hash.js";
import { adaptiveStateKey, overrideField, overridesKeyOfBucket, versionKey } from "../../../store/layout.js";
import { ClientShare } from "./client-share.js";
import { latencyBucket, QUANTILES, serialiseHistogram } from "../../../metrics/histogram.js";
import { settleQuietly } from "../../../util/log.js";
import { scriptReply } from "../../../store/replies.js";

/*
 * The isolate's side of an adaptive limit (docs/algorithms.md, Adaptive limit): each response of an adaptive
 * route is one sample (the origin's latency, whether it failed, how many were in flight when it
 * was admitted), added to this isolate's report for the route's bucket in its region. About twice
 * per interval the report goes to lua/adaptive.lua in the bucket's Redis, deferred (waitUntil):
 * the script moves the limit and writes it where decide.lua reads overrides, and the reply goes
 * into this isolate's copy of the overrides so that its next decisions use it at once.
 */

/** Reports kept at most (one per adaptive route and region this isolate serves). */
const MAX_REPORTS = 256;

/** How long a learnt limit stands without reports: lua/adaptive.lua's STATE_TTL_MS, which writes it. */
const LEARNT_LIMIT_TTL_MS = 600_000;

/** One response of an adaptive route, as the origin gave it (a 4xx is the client's, never a sample). */
export interface Sample {
  /** The origin's time from the request's body fully sent to its response's headers. */
  latencyMs: number;
  /** A 5xx or no answer at all: the origin is past what it can take. */
  failed: boolean;
  /** Whose request it was (the client's address): one client's share of a report is bounded. */
  client: string;
}

/** What lua/adaptive.lua told of the limit, for tests and the admin view. */
export interface AdaptiveReply {
  limit: number;
  shortMs?: number;
  baseMs: number;
  closed: boolean;
}

interface Report {
  readonly bucket: Bucket;
  readonly route: Route;
  readonly settings: AdaptiveSettings;
  readonly prefix: string;
  /** The bucket's hash (its key's tail): it names the state key and the override field. */
  readonly hash: KeyHash;
  counts: Map<number, number>;
  /** How many of this report's samples each client has: beyond its share they do not count. */
  share: ClientShare;
  n: number;
  errors: number;
  peak: number;
  startedAt: number;
  sending: boolean;
  /** The limit in force as the last reply said (the configured initial one before). */
  limit: number;
}

type AdaptiveSettings = NonNullable<Route["adaptive"]>;

export class AdaptiveReports {
  private readonly reports = new Map<string, Report>();

  constructor(private readonly capacity = MAX_REPORTS) {}

  /**
   * Adds one response of an adaptive route to this isolate's report, and sends the report if it
   * is half an interval old (deferred: nothing waits for it).
   */
  record(
    at: { bucket: Bucket; outcome: LimitOutcome; route: Route; prefix: string },
    sample: Sample,
    now: number,
    defer: Defer,
    overrides: OverrideCopies,
  ): void {
    const settings = at.route.adaptive;
    if (!settings) return;
    const r = this.reportOf(at, settings, now);
    if (r.share.admit(sample.client)) count(r, sample);
    // the slots a client's uncounted requests held were held all the same
    r.peak = Math.max(r.peak, r.limit - at.outcome.remaining);
    if (r.sending || now - r.startedAt < settings.interval / 2) return;
    defer(settleQuietly(this.send(r, now, overrides), "adaptive_report_failed"));
  }

  private reportOf(
    at: { bucket: Bucket; route: Route; prefix: string },
    settings: AdaptiveSettings,
    now: number,
  ): Report {
    const id = `${at.bucket.store.id}\u0000${at.bucket.key}`;
    let r = this.reports.get(id);
    if (!r) {
      if (this.reports.size >= this.capacity) this.reports.delete(this.reports.keys().next().value as string);
      const hash = asKeyHash(at.bucket.key.slice(at.bucket.key.lastIndexOf(":") + 1));
      const share = new ClientShare(settings.client_share);
      const fresh = { counts: new Map(), share, n: 0, errors: 0, peak: 0, startedAt: now, sending: false };
      r = { ...at, settings, hash, ...fresh, limit: settings.initial };
      this.reports.set(id, r);
    }
    return r;
  }

  /** Sends what the report holds and starts a new one; the reply's limit goes into the override copy. */
  private async send(r: Report, now: number, overrides: OverrideCopies): Promise<AdaptiveReply> {
    const { counts, n, errors, peak } = r;
    const share = new ClientShare(r.settings.client_share);
    Object.assign(r, { counts: new Map(), share, n: 0, errors: 0, peak: 0, startedAt: now, sending: true });
    try {
      const reply = await runAdaptive(r, { counts, n, errors, peak });
      r.limit = reply.limit;
      const value = `${reply.limit}:${reply.limit}:${r.bucket.limit.period}:${now + LEARNT_LIMIT_TTL_MS}`;
      overrides.patch(r.bucket, fieldOf(r), value);
      return reply;
    } finally {
      r.sending = false;
    }
  }
}

/** Adds a sample its client's share lets count to the report. */
function count(r: Report, sample: Sample): void {
  if (sample.failed) r.errors += 1;
  else {
    const i = latencyBucket(sample.latencyMs);
    r.counts.set(i, (r.counts.get(i) ?? 0) + 1);
  }
  r.n += 1;
}

/** The override field of the adaptive bucket: the limit's name and the bucket's hash. */
function fieldOf(r: Report): string {
  return overrideField(r.bucket.limit.name, r.hash);
}

/** One call of lua/adaptive.lua with a report's figures. */
async function runAdaptive(
  r: Report,
  figures: { counts: Map<number, number>; n: number; errors: number; peak: number },
): Promise<AdaptiveReply> {
  const a = r.settings;
  const quantile = Math.round(QUANTILES[a.latency] * 1000);
  const settings = [a.initial, a.min, a.max, a.interval, r.bucket.limit.period, a.target ?? 0, quantile];
  settings.push(Math.round(a.tolerance * 1000));
  const reply = await r.bucket.store.run(
    r.bucket.store.script(adaptiveLua),
    [adaptiveStateKey(r.prefix, r.route.name, r.hash), overridesKeyOfBucket(r.bucket.key), versionKey(r.prefix)],
    [
      fieldOf(r),
      settings.join(":"),
      `${figures.n}:${figures.errors}:${figures.peak}`,
      serialiseHistogram(figures.counts),
    ],
  );
  const state = scriptReply(reply, "adaptive.lua", { length: 4 }).map(Number);
  const [limit, short, base, closed] = state as [number, number, number, number];
  return { limit, shortMs: short < 0 ? undefined : short / 10, baseMs: base / 10, closed: closed === 1 };
}
