import type { Route } from "../config/index.js";
import type { OriginReply } from "../origin/forward.js";
import { fromBase64, toBase64 } from "../util/base64.js";
import { declaresMoreThan, readCapped } from "../util/body.js";
import { pollWhile } from "../util/poll.js";
import { Problem } from "../problem.js";
import type { Store } from "../store/redis.js";
import { canonicalBody, fingerprint, parseKey, sha256Hex } from "./key.js";
import {
  claim,
  complete,
  noteClaim,
  recordRef,
  settleFailure,
  type Claim,
  type ClaimTicket,
  type RecordRef,
} from "./records.js";
import { IdempotencyRefusal, noteOriginReply, traceHeader, type RecordTrail } from "./trail.js";

/** Headers of the origin's answer that are kept and replayed; cookies and hop-by-hop ones never are. */
const REPLAYED_HEADERS = [
  "content-type",
  "content-language",
  "cache-control",
  "etag",
  "last-modified",
  "location",
  "link",
  "retry-after",
];
/** The largest request body an idempotent request may carry: it is read whole to fingerprint it. */
export const MAX_REQUEST_BODY = 10 * 1024 * 1024;

export type IdempotencySettings = NonNullable<Route["idempotency"]>;

/** What a request is, for its key: the route it came by, and the method, path, query and principal that make it the same request. */
export interface ClaimSubject {
  route: string;
  /** The path the origin is asked for. */
  path: string;
  query: string;
  /** Who asks (the configured identity, else the client IP): one client's key is not another's. */
  principal: string;
}

/** Where claims live: the home region's Redis with the decision budget (claim) and with a budget for storing answers (settle). */
export interface ClaimStores {
  prefix: string;
  claim: Store;
  settle: Store;
  /** The request's trace and session for the ledger, and where outcomes are counted. */
  trail?: RecordTrail;
}

/** What the idempotency step decided: go to the origin with these, or answer with the stored answer. */
export type Guarded =
  | {
      kind: "forward";
      request: Request;
      sluiceHeaders: Record<string, string>;
      settle: (reply: OriginReply & { latencyMs?: number }) => Promise<Response>;
      abandon: () => Promise<void>;
      /** The claim, for a request that goes to the queue instead (absent: no key, nothing claimed). */
      ticket?: ClaimTicket;
    }
  | { kind: "replay"; response: Response };

/**
 * One side effect per key. Claims the request's key (header, or derived from the body), and
 * either lets it through, holding the claim, with a fencing token for the origin, or answers
 * with the stored answer (replay). Throws a `Problem`: 409 while another attempt is in flight or
 * the outcome is indeterminate, 422 when the key comes with a different request, 400 when a
 * required key is missing, 413 when the body is too large to fingerprint. `settle` stores the
 * origin's answer (or releases / holds the claim when the origin failed). `leaseMs` overrides the
 * configured lease: a queued request holds its claim until the consumer settles it.
 */
export async function guard(
  request: Request,
  settings: IdempotencySettings,
  subject: ClaimSubject,
  stores: ClaimStores,
  defer: (work: Promise<void>) => void,
  leaseMs?: number,
): Promise<Guarded> {
  const parsed = parseKey(request.headers.get("idempotency-key"));
  if (!parsed.ok) throw refusal(400, "Invalid Idempotency-Key", parsed.detail);
  if (parsed.key === undefined && !settings.derive) {
    if (settings.required) {
      const detail = `${request.method} ${subject.route} needs an Idempotency-Key header`;
      throw refusal(400, "Idempotency-Key required", detail);
    }
    // nothing to claim: the body is not needed, so it is streamed to the origin unread
    const unguarded = async () => undefined;
    return { kind: "forward", request, sluiceHeaders: {}, settle: async (reply) => reply.response, abandon: unguarded };
  }
  const body = await readBody(request);
  const canonical = canonicalBody(body, request.headers.get("content-type"), settings.ignore);
  const key = parsed.key ?? (await derivedKey(request.method, subject, canonical));
  const ref = await recordRef(stores.claim, stores.prefix, subject.route, subject.principal, key, stores.trail);
  const fp = await fingerprint(request.method, subject.path, subject.query, subject.principal, canonical);
  const owner = crypto.randomUUID();

  // a duplicate of an in-flight request may wait (polling with backoff) for its answer
  const once = () => claim(ref, owner, fp, leaseMs ?? settings.lease, settings.ttl);
  const poll = { startMs: 50, maxMs: 500, budgetMs: settings.wait };
  const c = noteClaim(ref, await pollWhile(await once(), (r) => r.kind === "inflight", once, poll));
  if (c.kind !== "claimed") return countedAsOutcome(() => refused(c));

  const settledRef: RecordRef = { ...ref, store: stores.settle };
  return {
    kind: "forward",
    request: rebuilt(request, body),
    sluiceHeaders: { "sluice-fencing-token": String(c.fence), "idempotency-key": key, ...traceHeader(stores.trail) },
    settle: (reply) => settleClaim(settledRef, owner, settings, reply, defer),
    // sluice itself decided not to forward (a busy session, a full queue): the key is free for the retry
    abandon: async () => {
      await settleFailure(settledRef, owner, "release", undefined).catch(() => false);
    },
    ticket: { keyHash: ref.keyHash, fenceKey: ref.fenceKey, owner },
  };
}

/** A key for a request that brought none (`derive`): the same request, the same key; method, path, query, who asks, what body. */
async function derivedKey(method: string, subject: ClaimSubject, canonical: Uint8Array): Promise<string> {
  const { path, query, principal } = subject;
  return sha256Hex(
    new TextEncoder().encode(JSON.stringify([method, path, query, principal, await sha256Hex(canonical)])),
  );
}

/** The whole body, to fingerprint it: 413 past the cap. */
async function readBody(request: Request): Promise<Uint8Array> {
  const read = declaresMoreThan(request, MAX_REQUEST_BODY)
    ? { whole: false as const }
    : await readCapped(request.body, MAX_REQUEST_BODY);
  if (!read.whole)
    throw refusal(413, "Request too large", `idempotent requests may carry at most ${MAX_REQUEST_BODY} bytes`);
  return read.bytes;
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
export async function settleClaim(
  ref: RecordRef,
  owner: string,
  settings: IdempotencySettings,
  reply: OriginReply & { latencyMs?: number },
  keep: (work: Promise<void>) => void,
): Promise<Response> {
  noteOriginReply(ref, reply);
  const res = reply.response;
  if (reply.outcome === "unrelayable") {
    await settleFailure(ref, owner, "hold", undefined).catch(() => false);
    return res;
  }
  if (reply.outcome !== "answered" || res.status >= 500) {
    await settleFailure(
      ref,
      owner,
      settings.on_origin_error,
      reply.outcome === "answered" ? res.status : undefined,
    ).catch(() => false);
    return res;
  }
  const [toClient, toStore] = res.body ? res.body.tee() : [null, null];
  keep(
    storeAnswer(ref, owner, settings, res, toStore).catch((e: unknown) =>
      console.error(
        JSON.stringify({ event: "idempotency_complete_error", route: ref.route, message: (e as Error).message }),
      ),
    ),
  );
  return new Response(toClient, res);
}

/** Stores the origin's answer for replays, reading its body from a tee as the client reads its own copy. */
async function storeAnswer(
  ref: RecordRef,
  owner: string,
  settings: IdempotencySettings,
  res: Response,
  body: ReadableStream<Uint8Array> | null,
): Promise<void> {
  const headers = REPLAYED_HEADERS.flatMap((h): Array<[string, string]> => {
    const v = res.headers.get(h);
    return v === null ? [] : [[h, v]];
  });
  let read;
  try {
    read = await readCapped(body, settings.max_body);
  } catch {
    // the origin's body broke off after it answered: it acted, but there is no answer to replay
    await settleFailure(ref, owner, "hold", res.status);
    return;
  }
  await complete(ref, owner, res.status, headers, read.whole ? toBase64(read.bytes) : "", read.whole, settings.ttl);
}

function refused(c: Exclude<Claim, { kind: "claimed" }>): Guarded {
  switch (c.kind) {
    case "completed":
      if (!c.stored)
        throw refusal(
          409,
          "Completed, answer not stored",
          "this key's request completed, but its answer was too large to keep; it will not run again",
        );
      return {
        kind: "replay",
        response: new Response(c.body ? fromBase64(c.body) : null, {
          status: c.status,
          headers: [...c.headers, ["idempotent-replayed", "true"]],
        }),
      };
    case "inflight":
      throw refusal(
        409,
        "Request in flight",
        `a request with this key is still running (fencing token ${c.fence})`,
        { "Retry-After": "1" },
        { lease_left_ms: c.leftMs },
      );
    case "indeterminate":
      throw refusal(
        409,
        "Outcome indeterminate",
        "a request with this key failed at the origin after it may have taken effect; an operator must resolve it",
        { "Retry-After": "60" },
      );
    case "mismatch":
      throw refusal(
        422,
        "Idempotency-Key reused",
        "this key was used with a different request (method, path, query, principal or body)",
      );
  }
}

function refusal(
  status: number,
  title: string,
  detail: string,
  headers?: Record<string, string>,
  extensions?: Record<string, number>,
): Problem {
  return new Problem({ status, title, detail, headers, extensions });
}

/** A refusal of a duplicate is counted among the idempotency outcomes, not the limits' decisions. */
function countedAsOutcome(refuse: () => Guarded): Guarded {
  try {
    return refuse();
  } catch (e) {
    throw e instanceof Problem ? new IdempotencyRefusal(e.init) : e;
  }
}

function rebuilt(request: Request, body: Uint8Array): Request {
  const hasBody = request.method !== "GET" && request.method !== "HEAD";
  return new Request(request.url, { method: request.method, headers: request.headers, body: hasBody ? body : null });
}
