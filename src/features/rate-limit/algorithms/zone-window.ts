/**
 * Windows of whole days that start at local midnight in an IANA time zone (`align` of a
 * fixed_window limit). Redis's Lua has no time-zone database, so the window is computed here, with
 * `Intl.DateTimeFormat`, and handed to decide.lua (its `window` column); the isolate's own models
 * (algorithms.ts) use the same function, so a local decision, a lease and the blocked-bucket cache
 * agree with the script on where a window ends.
 *
 * A window of N days holds the local dates k·N .. k·N + N − 1 (dates counted from 1970-01-01), from
 * the first instant of the first of them to the first instant of the day after the last: local
 * midnight, or where a zone skips midnight, the end of the gap. A window spanning a DST change
 * is an hour shorter or longer than N × 24 h.
 */

export const DAY_MS = 86_400_000;

/** One window: its index (the local date of its first day ÷ N), UTC bounds, and the zone's offset at its start. */
export interface ZoneWindow {
  index: number;
  startMs: number;
  endMs: number;
  /** index × period − startMs: what decide.lua adds to Redis's clock before flooring to the period, when its clock is outside [startMs, endMs). */
  offsetMs: number;
}

const formats = new Map<string, Intl.DateTimeFormat>();

function formatOf(zone: string): Intl.DateTimeFormat {
  let f = formats.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: zone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    formats.set(zone, f);
  }
  return f;
}

/** Whether `zone` is a time zone this runtime knows (an IANA name, or "UTC"). */
export function isTimeZone(zone: string): boolean {
  try {
    formatOf(zone);
    return true;
  } catch {
    return false;
  }
}

/** The local wall-clock time at `utcMs`, as ms since 1970-01-01T00:00 of the local calendar (whole seconds). */
export function localMsAt(zone: string, utcMs: number): number {
  const parts: Record<string, number> = {};
  for (const p of formatOf(zone).formatToParts(new Date(utcMs)))
    if (p.type !== "literal") parts[p.type] = Number(p.value);
  const { year = 1970, month = 1, day = 1, hour = 0, minute = 0, second = 0 } = parts;
  return Date.UTC(year, month - 1, day, hour, minute, second);
}

/** The local date (days since 1970-01-01) at `utcMs`. */
function localDay(zone: string, utcMs: number): number {
  return Math.floor(localMsAt(zone, utcMs) / DAY_MS);
}

/**
 * The first instant (whole seconds, UTC ms) whose local date is `day` or later. Offsets lie within
 * −12 h .. +14 h, so it lies in [day − 14 h, day + 12 h] read as UTC; a binary search over seconds
 * finds it whatever the zone does at midnight (a skipped midnight starts the day at the gap's end).
 */
export function dayStartMs(zone: string, day: number): number {
  let lo = Math.floor((day * DAY_MS - 15 * 3_600_000) / 1000);
  let hi = Math.floor((day * DAY_MS + 13 * 3_600_000) / 1000);
  // invariant: localDay(lo) < day <= localDay(hi)
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (localDay(zone, mid * 1000) >= day) hi = mid;
    else lo = mid;
  }
  return hi * 1000;
}

/** The window of `periodMs` (whole days) in `zone` that holds the instant `nowMs`. */
export function zoneWindowAt(zone: string, periodMs: number, nowMs: number): ZoneWindow {
  const days = periodMs / DAY_MS;
  const index = Math.floor(localDay(zone, nowMs) / days);
  const startMs = dayStartMs(zone, index * days);
  const endMs = dayStartMs(zone, (index + 1) * days);
  return { index, startMs, endMs, offsetMs: index * periodMs - startMs };
}

/** The last window computed per zone and period: reused while the clock stays in it (a window lasts a day or more). */
const recent = new Map<string, ZoneWindow>();

/** zoneWindowAt, remembered: one Intl lookup per zone, period and window rather than per request. */
export function zoneWindow(zone: string, periodMs: number, nowMs: number): ZoneWindow {
  const key = `${zone}/${periodMs}`;
  const last = recent.get(key);
  if (last && nowMs >= last.startMs && nowMs < last.endMs) return last;
  const w = zoneWindowAt(zone, periodMs, nowMs);
  recent.set(key, w);
  return w;
}

/** Whether a period can be aligned to a zone: a whole number of days. */
export function alignablePeriod(periodMs: number): boolean {
  return periodMs >= DAY_MS && periodMs % DAY_MS === 0;
}

/** decide.lua's `window` column: "" for windows aligned on UTC, else "start_ms:end_ms:offset_ms". */
export function windowColumn(align: string | undefined, periodMs: number, nowMs: number): string {
  if (align === undefined || !alignablePeriod(periodMs)) return "";
  const w = zoneWindow(align, periodMs, nowMs);
  return `${w.startMs}:${w.endMs}:${w.offsetMs}`;
}

/**
 * What is wrong with a limit's `align` for its period, if anything: a period of whole days, a zone
 * this runtime knows (which algorithms take `align` at all, the registry says: the schema asks it first).
 */
export function alignProblem(zone: string, periodMs: number): string | undefined {
  if (!alignablePeriod(periodMs))
    return `needs a period of whole days ("1d", "7d"): windows start at local midnight, and ${periodMs} ms is not`;
  if (!isTimeZone(zone)) return `"${zone}" is not a time zone: use an IANA name such as "Asia/Shanghai" or "UTC"`;
  return undefined;
}
