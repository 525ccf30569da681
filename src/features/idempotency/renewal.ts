import { renew, type RecordRef } from "./records.js";
import { logError } from "../../util/log.js";

/**
 * The longest a claim is renewed for one request: far past any origin call plus the wait for a late
 * answer, a backstop for a holder that never settles (Workers end its context sooner anyway).
 */
const RENEW_AT_MOST_MS = 10 * 60_000;

export interface Renewal {
  /** Stops renewing (the claim is settled, or given up). */
  stop(): void;
  /** Settles when the renewals have stopped; never rejects. */
  done: Promise<void>;
}

/**
 * Keeps `owner`'s claim alive while its request runs: every third of the lease the lease is
 * extended by a whole lease, so a call longer than `lease` is never taken over by a duplicate.
 * Only a holder that died (its isolate gone, so nobody renews) lets its lease run out. Stops by
 * itself when the claim is no longer this owner's (taken over, settled).
 */
export function keepClaimed(ref: RecordRef, owner: string, leaseMs: number): Renewal {
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
        if (!(await renew(ref, owner, leaseMs))) return;
      } catch (e) {
        // one renewal lost is not the claim lost: the lease still has two thirds to run
        logError("idempotency_renew_error", e, { route: ref.route });
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
