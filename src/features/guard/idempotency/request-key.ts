import type { Route } from "../../../config/index.js";
import { declaresMoreThan, readCapped } from "../../../util/body.js";
import { Problem } from "../../../problem.js";
import { PROBLEMS, type ProblemKind } from "../../../problem-types.js";
import { keyFromFields } from "./derive.js";
import { canonicalBody, derivedKey, fingerprint, parseKey } from "./key.js";

/** The largest request body an idempotent request may carry: it is read whole to fingerprint it. */
export const MAX_REQUEST_BODY = 10 * 1024 * 1024;

export type IdempotencySettings = NonNullable<Route["idempotency"]>;

/** Who asks, for a key: whose key it is, and from which address. */
export interface Asker {
  /** Who asks (the configured identity, else the client IP): one client's key is not another's. */
  principal: string;
  /** The client's address, spelled as the principal "ip" is: its replays are bounded whatever principals it claims. */
  client?: string;
}

/** What an HTTP request is, for its key: the route it came by, and the method, path, query and principal that make it the same request. */
export interface RequestOfKey {
  route: string;
  method: string;
  /** The path the origin is asked for. */
  path: string;
  query: string;
  /**
   * Who asks, asked only of a request that has a key to claim (a request without one passes
   * unguarded, whoever it is): an `auto` principal whose token cannot be checked just now throws
   * a 503 problem (src/identity/principal.ts) rather than name another principal.
   */
  who: () => Promise<Asker>;
}

/** A request's key, read: the key, its fingerprint, whose, and the request to send on (its body read to fingerprint it). */
export interface ReadKey {
  key: string;
  fingerprint: string;
  asker: Asker;
  /** The same request, its body kept in memory (it was read whole). */
  request: Request;
}

/**
 * The request's key and fingerprint, or nothing to claim (no key, none required or derived): with
 * `derive = { fields }`, always the fields' (the header is not read); else the header's, else with
 * `derive = true` one made from the canonical body. Throws a 400 problem for a malformed key, a
 * required key that is missing, or fields the body lacks, and a 413 for a body too large to
 * fingerprint.
 */
export async function readRequestKey(
  request: Request,
  settings: IdempotencySettings,
  of: RequestOfKey,
): Promise<ReadKey | undefined> {
  const keyed = await keyOf(request, settings, of);
  if (!keyed) return undefined;
  const asker = await of.who();
  const fp = await fingerprint(of.method, of.path, of.query, asker.principal, keyed.canonical);
  return { key: keyed.key, fingerprint: fp, asker, request: rebuilt(request, keyed.body) };
}

/** A request's key and the body it was read from. */
interface Keyed {
  key: string;
  body: Uint8Array;
  /** What the fingerprint hashes of the body: its canonical form, or with `derive.fields` those fields'. */
  canonical: Uint8Array;
}

async function keyOf(request: Request, settings: IdempotencySettings, of: RequestOfKey): Promise<Keyed | undefined> {
  if (typeof settings.derive === "object") {
    const body = await readBody(request);
    const fields = await keyFromFields(of, body, settings.derive);
    return { key: fields.key, body, canonical: fields.canonical };
  }
  const parsed = parseKey(request.headers.get("idempotency-key"));
  if (!parsed.ok) throw refusal(PROBLEMS.invalidIdempotencyKey, parsed.detail);
  if (parsed.key === undefined && !settings.derive) {
    if (!settings.required) return undefined;
    // what the client sent (method and path), then the route it met, by name
    const path = new URL(request.url).pathname;
    const detail = `${request.method} ${path} needs an Idempotency-Key header (route "${of.route}")`;
    throw refusal(PROBLEMS.idempotencyKeyRequired, detail);
  }
  const body = await readBody(request);
  const canonical = canonicalBody(body, request.headers.get("content-type"), settings.ignore);
  return { key: parsed.key ?? (await keyOfBody(of, canonical)), body, canonical };
}

/** A key for a request that brought none (`derive`): the same request, the same key; method, path, query, who asks, what body. */
async function keyOfBody(of: RequestOfKey, canonical: Uint8Array): Promise<string> {
  const { principal } = await of.who();
  return derivedKey(of.method, of.path, of.query, principal, canonical);
}

/** The whole body, to fingerprint it: 413 past the cap. */
async function readBody(request: Request): Promise<Uint8Array> {
  const read = declaresMoreThan(request, MAX_REQUEST_BODY)
    ? { whole: false as const }
    : await readCapped(request.body, MAX_REQUEST_BODY);
  if (!read.whole)
    throw refusal(PROBLEMS.requestTooLarge, `idempotent requests may carry at most ${MAX_REQUEST_BODY} bytes`);
  return read.bytes;
}

function refusal(type: ProblemKind, detail: string): Problem {
  return new Problem({ type, detail });
}

function rebuilt(request: Request, body: Uint8Array): Request {
  const hasBody = request.method !== "GET" && request.method !== "HEAD";
  return new Request(request.url, { method: request.method, headers: request.headers, body: hasBody ? body : null });
}
