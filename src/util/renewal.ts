/**
 * The longest one holder is renewed: far past any origin call plus the wait for a late answer and
 * the retries of storing its outcome, a backstop for a holder that never settles (Workers end its
 * context sooner anyway).
 */
const RENEW_AT_MOST_MS = 10 * 60_000;

export interface Renewal {
  /** Stops renewing (the guard is settled, or given up). */
  stop(): void;
  /** Settles when the renewals have stopped (a renewal under way has landed or failed); never rejects. */
  done: Promise<void>;
}

/**
 * Keeps a lease alive while its holder works: every third of the lease, `renew` extends it by a
 * whole lease, so work longer than the lease is never taken from a live holder; only a holder that
 * died (nobody renews) lets its lease run out. Stops by itself when `renew` says the lease is no
 * longer the holder's. A failed renewal is told to `failed` and the loop goes on: one renewal lost
 * is not the lease lost, the lease still has two thirds to run.
 */
export function keepRenewing(renew: () => Promise<boolean>, leaseMs: number, failed: (e: unknown) => void): Renewal {
  let stopped = false;
  let wake: () => void = () => undefined;
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      wake = () => (clearTimeout(timer), resolve());
    });
  const every = Math.max(100, Math.floor(leaseMs / 3));
  const until = Date.now() + RENEW_AT_MOST_MS;
  const loop = async () => {
    while (!stopped && Date.now() < until) {
      await pause(every);
      if (stopped) return;
      try {
        if (!(await renew())) return;
      } catch (e) {
        failed(e);
      }
    }
  };
  return {
    stop: () => {
      stopped = true;
      wake();
    },
    done: loop(),
  };
}
