/**
 * The decision budget of one store, from the round trip it actually shows this isolate.
 *
 * A fixed budget cannot serve a store next door (2 ms) and one an ocean away (80 ms) at once:
 * tight enough for the first, it turns every call to the second into a timeout. So each store's
 * round trip is smoothed as TCP smooths it (RFC 6298, section 2): SRTT and RTTVAR from the replies
 * seen, and a budget of SRTT + 4·RTTVAR plus a margin, held between the operator's floor and ceiling.
 */

/** The operator's bounds: `timeout_ms` (floor) and `max_timeout_ms` (ceiling). */
export interface BudgetBounds {
  floorMs: number;
  ceilingMs: number;
}

/** RFC 6298's gains and variance factor. */
const ALPHA = 1 / 8;
const BETA = 1 / 4;
const K = 4;
/**
 * Added to SRTT + 4·RTTVAR. On a steady link RTTVAR shrinks towards zero and the budget would
 * hug the mean; a quarter of the round trip (at least 10 ms) absorbs what the deviation has not
 * seen yet: a busy isolate, a garbage collection, a larger reply.
 */
const MIN_MARGIN_MS = 10;
const MARGIN_SHARE = 1 / 4;

export class RttEstimator {
  private srtt: number | undefined;
  private rttvar = 0;
  /** After a timeout: the least the next budget may be (twice the one that ran out), until a reply comes. */
  private backedOff = 0;

  /** A round trip that came back (a reply, or an error reply: either way the store answered). */
  sample(ms: number): void {
    const r = Math.max(0, ms);
    if (this.srtt === undefined) {
      this.srtt = r;
      this.rttvar = r / 2;
    } else {
      // RTTVAR first, with the old SRTT, as RFC 6298 (2.3) orders it
      this.rttvar = (1 - BETA) * this.rttvar + BETA * Math.abs(this.srtt - r);
      this.srtt = (1 - ALPHA) * this.srtt + ALPHA * r;
    }
    this.backedOff = 0;
  }

  /**
   * A call that ran out of its budget. Not a sample (its round trip is unknown, only longer than
   * the budget), but the next call gets twice that budget (RFC 6298, 5.5), so a store that has
   * grown slower is found again instead of timing out call after call.
   */
  timedOut(budgetMs: number): void {
    this.backedOff = Math.max(this.backedOff, 2 * budgetMs);
  }

  /**
   * The budget of the next call. Before any reply, the ceiling: a cold isolate knows nothing of
   * the store, and must not time out on a far one while it learns.
   */
  budget({ floorMs, ceilingMs }: BudgetBounds): number {
    if (this.srtt === undefined) return ceilingMs;
    const margin = Math.max(MIN_MARGIN_MS, MARGIN_SHARE * this.srtt);
    const estimate = Math.max(Math.ceil(this.srtt + K * this.rttvar + margin), this.backedOff);
    return Math.min(ceilingMs, Math.max(floorMs, estimate));
  }

  /** The smoothed figures (ms), for logs and the health page; undefined before the first reply. */
  get smoothed(): { srttMs: number; rttvarMs: number } | undefined {
    return this.srtt === undefined ? undefined : { srttMs: this.srtt, rttvarMs: this.rttvar };
  }
}
