import type { Exchange } from "./gateway.js";
import { guard, type Guarded } from "./idempotency/guard.js";
import type { ClaimTicket } from "./idempotency/records.js";
import type { OriginReply } from "./origin/forward.js";
import { holdSession, type SessionHold, type SessionTicket } from "./session/guard.js";
import { problem } from "./shed/problem.js";
import { StoreError } from "./store/deadline.js";

/**
 * The guards of a side-effecting request, taken before it goes anywhere (the origin now, or the
 * queue for later): an answer without the origin (a replay, a duplicate in flight, a busy session,
 * a guard store that cannot be reached), or the go-ahead with what the origin must be told.
 */
export type SideEffect =
  | { kind: "answer"; response: Response; decision: "replay" | "reject" }
  | {
      kind: "go";
      /** The request to send (its body already read when the key had to be fingerprinted). */
      request: Request;
      /** Fencing token, Idempotency-Key, Sluice-Session: set on the forwarded request. */
      sluiceHeaders: Record<string, string>;
      /** Records what the origin did against the key; gives the response for the client. */
      settle: (reply: OriginReply) => Promise<Response>;
      /** Gives the session lock back (the key is settled by `settle`). */
      release: () => Promise<void>;
      /** Sluice decided not to send it after all: the key and the session are free again. */
      abandon: () => Promise<void>;
      /** What a queued job carries so the consumer can settle and release. */
      claim?: ClaimTicket;
      session?: SessionTicket;
    };

/**
 * One side effect per key, then one call per session at a time: claims the request's
 * idempotency key and its session lock, where the route has them for this method. Either store
 * failing is a 503, whatever `on_store_error` says for limits: a side effect is never sent
 * unguarded. `claimLeaseMs` holds the key longer than the configured lease (a queued request).
 */
export async function claimSideEffect(x: Exchange, claimLeaseMs?: number): Promise<SideEffect> {
  const { route, request } = x;
  let guarded: Guarded | undefined;
  let session: SessionHold = { kind: "none" };
  try {
    if (route.idempotency?.methods.includes(request.method)) {
      guarded = await guard(x, claimLeaseMs);
      if (guarded.kind === "answer") return guarded;
    }
    if (route.session?.methods.includes(request.method)) session = await holdSession(x);
  } catch (e) {
    if (!(e instanceof StoreError)) throw e;
    if (guarded?.kind === "forward") await guarded.abandon();
    return {
      kind: "answer",
      decision: "reject",
      response: problem({ status: 503, title: "Coordination store unavailable", detail: `idempotency records or session locks could not be reached (${e.reason})`, headers: { "Retry-After": "1" } }),
    };
  }
  const claimed = guarded?.kind === "forward" ? guarded : undefined;
  if (session.kind === "busy") {
    await claimed?.abandon();
    return { kind: "answer", decision: "reject", response: session.response };
  }
  const held = session.kind === "held" ? session : undefined;
  const release = async () => {
    await held?.release();
  };
  return {
    kind: "go",
    request: claimed?.request ?? request,
    sluiceHeaders: sluiceHeadersOf(claimed?.sluiceHeaders ?? {}, held?.headers),
    settle: claimed ? claimed.settle : async (reply) => reply.response,
    release,
    abandon: async () => {
      await Promise.all([claimed?.abandon(), release()]);
    },
    claim: claimed?.ticket,
    session: held?.ticket,
  };
}

/**
 * What sluice tells the origin: the fencing token of the grant that lets the call through (the
 * session's when the route has one, else the idempotency claim's), the session, the key.
 */
function sluiceHeadersOf(idem: Record<string, string>, session: Record<string, string> | undefined): Record<string, string> {
  if (!session) return idem;
  const { "sluice-fencing-token": idemToken, ...rest } = idem;
  return { ...rest, ...(idemToken ? { "sluice-idempotency-fencing-token": idemToken } : {}), ...session };
}
