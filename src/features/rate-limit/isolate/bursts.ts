/** Admissions closer together than this (ms) are one burst; a burst's size is what is admitted within this of its first. The horizon's floor: one round trip to a store nearby, with room. */
export const BURST_WINDOW_MS = 100;

/** A run of admissions longer than this (ms) is steady traffic, not a burst. */
export const BURST_SPAN_MS = 250;

/** Bursts recur when the last two began within this (ms) of each other, and the last within this of now: a lease (0.25 to 1.25 s) granted in one then usually still lives at the next. */
export const RECUR_MS = 1_000;

/**
 * A bucket's bursts as one isolate sees them: runs of admissions (local or central) with less
 * than BURST_WINDOW_MS between each and the next, each sized by the tokens admitted within
 * BURST_WINDOW_MS of its first; a run over within BURST_SPAN_MS is a burst. Only the last two
 * are kept: bursts that recur are sized by the recent ones, and a client whose bursts grow or
 * shrink is followed within one.
 *
 * A steady client busier than one request per BURST_WINDOW_MS is one run that never ends (its
 * demand sizes its lease); a sparse one is runs of one request each (no burst).
 */
export class Bursts {
  /** When the last admission was (isolate clock, ms), undefined before the first. */
  private last: number | undefined;
  private run: Run = { start: 0, end: 0, size: 0 };
  private prev: Run | undefined;

  add(now: number, tokens: number): void {
    if (this.last === undefined || now - this.last >= BURST_WINDOW_MS) {
      if (this.last !== undefined) this.prev = this.run;
      this.run = { start: now, end: now, size: 0 };
    }
    this.last = now;
    this.run.end = now;
    if (now - this.run.start < BURST_WINDOW_MS) this.run.size += tokens;
  }

  /**
   * The larger of the last two bursts (tokens) when they recur: both runs of more than one
   * request (`cost`) over within BURST_SPAN_MS, begun within RECUR_MS of each other, the last
   * within RECUR_MS of `now`. Else 0: a one-off burst, a sparse client, or a steady one, which
   * demand covers.
   */
  peak(now: number, cost: number): number {
    const { run, prev } = this;
    if (!prev || now - run.start > RECUR_MS || run.start - prev.start > RECUR_MS) return 0;
    if (!isBurst(run, cost) || !isBurst(prev, cost)) return 0;
    return Math.max(run.size, prev.size);
  }
}

/** A run of admissions (isolate clock, ms), and the tokens admitted within BURST_WINDOW_MS of its first. */
interface Run {
  start: number;
  end: number;
  size: number;
}

const isBurst = (r: Run, cost: number): boolean => r.size >= 2 * cost && r.end - r.start <= BURST_SPAN_MS;
