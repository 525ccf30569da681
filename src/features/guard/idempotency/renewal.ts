import type { RecordRef } from "./record-ref.js";
import { renew } from "./records.js";
import { logError } from "../../../util/log.js";
import { keepRenewing, type Renewal } from "../../../util/renewal.js";

export type { Renewal };

/**
 * Keeps `owner`'s claim alive while its request runs, its late answer is awaited and its outcome
 * stored (src/util/renewal.ts): a call longer than `lease` is never taken for lapsed. Only a
 * holder that died, or lost Redis, lets its lease lapse, and a lapsed claim is indeterminate, not
 * free (lua/idempotency.lua). Stops by itself when the claim is no longer this owner's.
 */
export function keepClaimed(
  ref: RecordRef,
  owner: string,
  leaseMs: number,
  renewing: typeof keepRenewing = keepRenewing,
): Renewal {
  return renewing(
    () => renew(ref, owner, leaseMs),
    leaseMs,
    (e) => logError("idempotency_renew_error", e, { route: ref.route }),
  );
}
