import type { Route } from "../config/index.js";
import type { Exchange } from "../gateway.js";
import { identify } from "../keys/identify.js";
import type { OriginReply } from "../origin/forward.js";
import { homeStore, regionStore } from "../region/index.js";
import { fromBase64, toBase64 } from "../util/base64.js";
import { declaresMoreThan, readCapped } from "../util/body.js";
import { pollWhile } from "../util/poll.js";
import { problem } from "../shed/problem.js";
import { StoreError } from "../store/deadline.js";
import type { Store } from "../store/redis.js";
import { canonicalBody, fingerprint, parseKey, sha256Hex } from "./key.js";
import { claim, complete, recordRef, settleFailure, type Claim, type ClaimTicket, type RecordRef } from "./records.js";

/** Headers of the origin's answer that are kept and replayed; cookies and hop-by-hop ones never are. */
const REPLAYED_HEADERS = ["content-type", "content-language", "cache-control", "etag", "last-modified", "location", "link", "retry-after"];
/** The largest request body an idempotent request may carry: it is read whole to fingerprint it. */
export const MAX_REQUEST_BODY = 10 * 1024 * 1024;
/** Completing stores up to a MiB: give it more than a decision's budget. */
const SETTLE_TIMEOUT_MS = 5_000;

export type IdempotencySettings = NonNullable<Route["idempotency"]>;

/** What the idempotency step decided: go to the origin with these, or answer without it. */
export type Guarded =
  | {
      kind: "forward";
      request: Request;
      sluiceHeaders: Record<string, string>;
      settle: (reply: OriginReply) => Promise<Response>;
      abandon: () => Promise<void>;
      /** The claim, for a request that goes to the queue instead (absent: no key, nothing claimed). */
      ticket?: ClaimTicket;
    }
  | { kind: "answer"; response: Response; decision: "replay" | "reject" };

/**
 * One side effect per key. Claims the request's key (header, or derived from the body), and
 * either lets it through, holding the claim, with a fencing token for the origin, or answers
 * without the origin: the stored answer (replay), 409 while another attempt is in flight or the
 * outcome is indeterminate, 422 when the key comes with a different request, 400 when a required
 * key is missing, 413 when the body is too large to fingerprint. `settle` stores the origin's
 * answer (or releases / holds the claim when the origin failed). `leaseMs` overrides the
 * configured lease: a queued request holds its claim until the consumer settles it.
 */
export async function guard(x: Exchange, leaseMs?: number): Promise<Guarded> {
  const settings = x.route.idempotency;
  if (!settings) throw new Error("guard() on a route without idempotency");
  const parsed = parseKey(x.request.headers.get("idempotency-key"));
  if (!parsed.ok) return answer(400, "Invalid Idempotency-Key", parsed.detail);
  if (parsed.key === undefined && !settings.derive) {
    if (settings.required) return answer(400, "Idempotency-Key required", `${x.request.method} ${x.route.name} needs an Idempotency-Key header`);
    // nothing to claim: the body is not needed, so it is streamed to the origin unread
    return { kind: "forward", request: x.request, sluiceHeaders: {}, settle: async (reply) => reply.response, abandon: async () => undefined };
  }

  const read = declaresMoreThan(x.request, MAX_REQUEST_BODY) ? { whole: false as const } : await readCapped(x.request.body, MAX_REQUEST_BODY);
  if (!read.whole) return answer(413, "Request too large", `idempotent requests may carry at most ${MAX_REQUEST_BODY} bytes`);
  const body = read.bytes;
  const canonical = canonicalBody(body, x.request.headers.get("content-type"), settings.ignore);
  const who = identify(settings.principal, x.facts, "ip");
  const principal = who.kind === "id" ? who.id : x.facts.ip;
  // the same request: method, the path and query the origin is asked for, who asks, what body
  const path = x.target.path;
  const query = x.facts.url.search;
  const key = parsed.key ?? (await sha256Hex(new TextEncoder().encode(JSON.stringify([x.request.method, path, query, principal, await sha256Hex(canonical)]))));

  const store = homeStore(x.env, x.config, x.region);
  if (!store) throw new StoreError("unreachable", "no Upstash URL/token for the home region, where idempotency records live");
  const ref = await recordRef(store, x.config.key_prefix, x.route.name, principal, key);
  const fp = await fingerprint(x.request.method, path, query, principal, canonical);
  const owner = crypto.randomUUID();

  // a duplicate of an in-flight request may wait (polling with backoff) for its answer
  const once = () => claim(ref, owner, fp, leaseMs ?? settings.lease, settings.ttl);
  const c = await pollWhile(await once(), (r) => r.kind === "inflight", once, { startMs: 50, maxMs: 500, budgetMs: settings.wait });
  if (c.kind !== "claimed") return refused(c);

  const settledRef: RecordRef = { ...ref, store: settleStore(x) };
  return {
    kind: "forward",
    request: rebuilt(x.request, body),
    sluiceHeaders: { "sluice-fencing-token": String(c.fence), "idempotency-key": key },
    settle: (reply) => settleClaim(settledRef, owner, settings, reply, x.defer),
    // sluice itself decided not to forward (a busy session, a full queue): the key is free for the retry
    abandon: async () => {
      await settleFailure(settledRef, owner, "release", undefined).catch(() => false);
    },
    ticket: { keyHash: ref.keyHash, fenceKey: ref.fenceKey, owner },
  };
}

/** The home store with a budget for settling (an answer of up to a MiB), not a decision's. */
export function settleStore(x: Pick<Exchange, "env" | "config" | "region">): Store {
  // a fixed budget: the side effect happened, so its outcome is worth waiting for (and the store's circuit does not skip it)
  return regionStore(x.env, x.config, x.config.home_region, SETTLE_TIMEOUT_MS) as Store;
}

/**
 * Settles `owner`'s claim with what the origin did, and gives back the response for the client.
 * - An answer below 500 is stored for replays; storing runs in `keep` (after the response has
 *   gone, on the live path), reading the body from a tee as the client reads its own copy.
 * - No answer, a timeout or a 5xx: `on_origin_error` says whether the key is released (a retry
 *   runs again) or held as indeterminate.
 * - An answer that could not be relayed (an interim 1xx): the origin may have acted on it, so the
 *   key is held as indeterminate whatever `on_origin_error` says; releasing it would let a retry
 *   run the side effect a second time.
 */
export async function settleClaim(ref: RecordRef, owner: string, settings: IdempotencySettings, reply: OriginReply, keep: (work: Promise<void>) => void): Promise<Response> {
  const res = reply.response;
  if (reply.outcome === "unrelayable") {
    await settleFailure(ref, owner, "hold", undefined).catch(() => false);
    return res;
  }
  if (reply.outcome !== "answered" || res.status >= 500) {
    await settleFailure(ref, owner, settings.on_origin_error, reply.outcome === "answered" ? res.status : undefined).catch(() => false);
    return res;
  }
  const headers = REPLAYED_HEADERS.flatMap((h): Array<[string, string]> => {
    const v = res.headers.get(h);
    return v === null ? [] : [[h, v]];
  });
  const [toClient, toStore] = res.body ? res.body.tee() : [null, null];
  keep(
    (async () => {
      let read;
      try {
        read = await readCapped(toStore, settings.max_body);
      } catch {
        // the origin's body broke off after it answered: it acted, but there is no answer to replay
        await settleFailure(ref, owner, "hold", res.status);
        return;
      }
      await complete(ref, owner, res.status, headers, read.whole ? toBase64(read.bytes) : "", read.whole, settings.ttl);
    })().catch((e: unknown) => console.error(JSON.stringify({ event: "idempotency_complete_error", route: ref.route, message: (e as Error).message }))),
  );
  return new Response(toClient, res);
}

function refused(c: Exclude<Claim, { kind: "claimed" }>): Guarded {
  switch (c.kind) {
    case "completed":
      if (!c.stored) return answer(409, "Completed, answer not stored", "this key's request completed, but its answer was too large to keep; it will not run again");
      return { kind: "answer", decision: "replay", response: new Response(c.body ? fromBase64(c.body) : null, { status: c.status, headers: [...c.headers, ["idempotent-replayed", "true"]] }) };
    case "inflight":
      return answer(409, "Request in flight", `a request with this key is still running (fencing token ${c.fence})`, { "Retry-After": "1" }, { lease_left_ms: c.leftMs });
    case "indeterminate":
      return answer(409, "Outcome indeterminate", "a request with this key failed at the origin after it may have taken effect; an operator must resolve it", { "Retry-After": "60" });
    case "mismatch":
      return answer(422, "Idempotency-Key reused", "this key was used with a different request (method, path, query, principal or body)");
  }
}

function answer(status: number, title: string, detail: string, headers?: Record<string, string>, extensions?: Record<string, number>): Guarded {
  return { kind: "answer", decision: "reject", response: problem({ status, title, detail, headers, extensions }) };
}

function rebuilt(request: Request, body: Uint8Array): Request {
  const hasBody = request.method !== "GET" && request.method !== "HEAD";
  return new Request(request.url, { method: request.method, headers: request.headers, body: hasBody ? body : null });
}
