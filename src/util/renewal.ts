/**
 * The longest one holder is renewed: far past any origin call plus the wait for a late answer and
 * the retries of storing its outcome, a backstop for a holder that never settles (Workers end its
 * context sooner anyway).
 */
const RENEW_AT_MOST_MS = 10 * 60_000;

/**
 * The shortest lease a guard may be configured with (`idempotency.lease`, `session.lease`): the
 * loop renews every third of the lease (never more often than every 100 ms), and each renewal must
 * reach Redis and be answered before the lease runs out. A lease shorter than that lapses while its
 * holder lives: a session's next call would take the lock over mid-call.
 */
export const MIN_LEASE_MS = 1_000;

/** Why a configured lease is refused at load (shorter than `MIN_LEASE_MS`), or nothing. */
export function leaseProblem(leaseMs: number): string | undefined {
  if (leaseMs >= MIN_LEASE_MS) return undefined;
  return `must be at least "1s" (${leaseMs} ms given): a live call renews its lease every third of it, and a renewal must reach Redis before the lease runs out, or the call's guard lapses while it runs`;
}

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
