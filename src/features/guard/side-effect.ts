import { claim } from "./core.js";
import { replayedResponse } from "./idempotency/key-claim.js";
import type { ClaimTicket } from "./idempotency/record-ref.js";
import { readGuardedRequest, type GuardedAt } from "./scope-subject.js";
import type { SessionTicket } from "./session/lock-hold.js";

/** A queued side effect's guards, taken before it is queued; they travel with the job. */
export interface ClaimedEffect {
  /** The request to send (its body already read when the key had to be fingerprinted). */
  request: Request;
  sluiceHeaders: Record<string, string>;
  /** Sluice decided not to send it after all: the key and the session are free again. */
  abandon: () => Promise<void>;
  claim?: ClaimTicket;
  session?: SessionTicket;
}

/**
 * One side effect per key, then one call per session at a time, for a request that goes to the
 * queue instead of the origin: the guard core claims its idempotency key and takes its session
 * lock, where the route has them for this method, both held `lifeMs` (the job's life) until the
 * consumer takes them up (`takeUpJob`, job-claim.ts). A replay is returned as such; a refusal (duplicate in flight,
 * busy session, store down) is thrown.
 */
export async function claimSideEffect(
  request: Request,
  at: GuardedAt,
  lifeMs: number,
): Promise<ClaimedEffect | { kind: "replay"; response: Response }> {
  const read = await readGuardedRequest(request, at);
  const guarding = await claim(read.subject, read.place, { lifeMs, queued: true });
  if (guarding.kind === "replay") return { kind: "replay", response: replayedResponse(guarding.answer) };
  const held = guarding.claim;
  return {
    request: read.request,
    sluiceHeaders: held.sluiceHeaders,
    abandon: () => held.abandon("not queued"),
    claim: held.tickets.claim,
    session: held.tickets.session,
  };
}
