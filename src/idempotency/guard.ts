import type { Exchange } from "../gateway.js";
import { identify } from "../keys/identify.js";
import { homeStore } from "../region/index.js";
import { fromBase64, toBase64 } from "../util/base64.js";
import { pollWhile } from "../util/poll.js";
import { problem } from "../shed/problem.js";
import { StoreError } from "../store/deadline.js";
import type { Store } from "../store/redis.js";
import { canonicalBody, fingerprint, parseKey, sha256Hex } from "./key.js";
import { claim, complete, recordRef, settleFailure, type Claim, type RecordRef } from "./records.js";

/** Headers of the origin's answer that are kept and replayed; cookies and hop-by-hop ones never are. */
const REPLAYED_HEADERS = ["content-type", "content-language", "cache-control", "etag", "last-modified", "location", "link", "retry-after"];
const MAX_REQUEST_BODY = 10 * 1024 * 1024;
/** Completing stores up to a MiB: give it more than a decision's budget. */
const SETTLE_TIMEOUT_MS = 5_000;

/** What the idempotency step decided: go to the origin with these, or answer without it. */
export type Guarded =
  | { kind: "forward"; request: Request; sluiceHeaders: Record<string, string>; settle: (res: Response) => Promise<Response>; abandon: () => Promise<void> }
  | { kind: "answer"; response: Response; decision: "replay" | "reject" };

/**
 * One side effect per key. Claims the request's key (header, or derived from the body), and
 * either lets it through, holding the claim, with a fencing token for the origin, or answers
 * without the origin: the stored answer (replay), 409 while another attempt is in flight or the
 * outcome is indeterminate, 422 when the key comes with a different request, 400 when a required
 * key is missing. `settle` stores the origin's answer (or releases / holds the claim on a 5xx).
 */
export async function guard(x: Exchange): Promise<Guarded> {
  const settings = x.route.idempotency;
  if (!settings) throw new Error("guard() on a route without idempotency");
  const parsed = parseKey(x.request.headers.get("idempotency-key"));
  if (!parsed.ok) return answer(400, "Invalid Idempotency-Key", parsed.detail);

  const declared = Number(x.request.headers.get("content-length") ?? 0);
  if (declared > MAX_REQUEST_BODY) return answer(413, "Request too large", `idempotent requests may carry at most ${MAX_REQUEST_BODY} bytes`);
  const body = new Uint8Array(x.request.body ? await x.request.arrayBuffer() : new ArrayBuffer(0));
  const canonical = canonicalBody(body, x.request.headers.get("content-type"), settings.ignore);
  const who = identify(settings.principal, x.facts, "ip");
  const principal = who.kind === "id" ? who.id : x.facts.ip;

  let key = parsed.key;
  if (key === undefined && settings.derive) key = await sha256Hex(new TextEncoder().encode(JSON.stringify([x.request.method, x.route.name, principal, await sha256Hex(canonical)])));
  if (key === undefined) {
    if (settings.required) return answer(400, "Idempotency-Key required", `${x.request.method} ${x.route.name} needs an Idempotency-Key header`);
    return { kind: "forward", request: rebuilt(x.request, body), sluiceHeaders: {}, settle: async (res) => res, abandon: async () => undefined };
  }

  const store = homeStore(x.env, x.config, x.region);
  if (!store) throw new StoreError("unreachable", "no Upstash URL/token for the home region, where idempotency records live");
  const ref = await recordRef(store, x.config.key_prefix, x.route.name, principal, key);
  const fp = await fingerprint(x.request.method, x.facts.matchPath, principal, canonical);
  const owner = crypto.randomUUID();

  // a duplicate of an in-flight request may wait (polling with backoff) for its answer
  const once = () => claim(ref, owner, fp, settings.lease, settings.ttl);
  const c = await pollWhile(await once(), (r) => r.kind === "inflight", once, { startMs: 50, maxMs: 500, budgetMs: settings.wait });
  if (c.kind !== "claimed") return refused(c);

  const settleStore = homeStore(x.env, { ...x.config, timeout_ms: SETTLE_TIMEOUT_MS, global_timeout_ms: SETTLE_TIMEOUT_MS }, x.region) as Store;
  const settledRef: RecordRef = { ...ref, store: settleStore };
  return {
    kind: "forward",
    request: rebuilt(x.request, body),
    sluiceHeaders: { "sluice-fencing-token": String(c.fence), "idempotency-key": key },
    settle: (res) => settle(x, settledRef, owner, res),
    // sluice itself decided not to forward (a busy session): the key is free for the retry
    abandon: async () => {
      await settleFailure(settledRef, owner, "release", undefined).catch(() => false);
    },
  };
}

/** Stores a completed answer after the response has gone (waitUntil); settles a failure before. */
async function settle(x: Exchange, ref: RecordRef, owner: string, res: Response): Promise<Response> {
  const settings = x.route.idempotency as NonNullable<Exchange["route"]["idempotency"]>;
  if (res.status >= 500) {
    await settleFailure(ref, owner, settings.on_origin_error, res.status).catch(() => false);
    return res;
  }
  const headers = REPLAYED_HEADERS.flatMap((h): Array<[string, string]> => {
    const v = res.headers.get(h);
    return v === null ? [] : [[h, v]];
  });
  const [toClient, toStore] = res.body ? res.body.tee() : [null, null];
  x.defer(
    (async () => {
      const { bytes, whole } = await readUpTo(toStore, settings.max_body);
      await complete(ref, owner, res.status, headers, whole ? toBase64(bytes) : "", whole, settings.ttl);
    })().catch((e: unknown) => console.error(JSON.stringify({ event: "idempotency_complete_error", route: x.route.name, message: (e as Error).message }))),
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
      return answer(422, "Idempotency-Key reused", "this key was used with a different request (method, path, principal or body)");
  }
}

function answer(status: number, title: string, detail: string, headers?: Record<string, string>, extensions?: Record<string, number>): Guarded {
  return { kind: "answer", decision: "reject", response: problem({ status, title, detail, headers, extensions }) };
}

function rebuilt(request: Request, body: Uint8Array): Request {
  const hasBody = request.method !== "GET" && request.method !== "HEAD";
  return new Request(request.url, { method: request.method, headers: request.headers, body: hasBody ? body : null });
}

async function readUpTo(stream: ReadableStream<Uint8Array> | null, max: number): Promise<{ bytes: Uint8Array; whole: boolean }> {
  if (!stream) return { bytes: new Uint8Array(0), whole: true };
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > max) {
      await reader.cancel();
      return { bytes: new Uint8Array(0), whole: false };
    }
    chunks.push(value);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return { bytes: out, whole: true };
}
