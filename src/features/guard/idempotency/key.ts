import { hashIdentifier } from "../../../identity/hash.js";
import { canonicalJson } from "../../../util/canonical-json.js";
import { sha256Hex } from "../../../util/digest.js";

export type KeyResult = { ok: true; key: string } | { ok: false; detail: string } | { ok: true; key: undefined };

/**
 * The `Idempotency-Key` header: 1 to 255 printable ASCII characters, bare or as a quoted
 * structured-field string (`"abc"`). Absent: `{ key: undefined }`.
 *
 * @example parseKey('"order-42"') // { ok: true, key: "order-42" }
 */
export function parseKey(header: string | null): KeyResult {
  if (header === null) return { ok: true, key: undefined };
  let key = header.trim();
  if (key.length >= 2 && key.startsWith('"') && key.endsWith('"')) key = key.slice(1, -1).replace(/\\(["\\])/g, "$1");
  if (key.length === 0 || key.length > 255) return { ok: false, detail: "Idempotency-Key must be 1 to 255 characters" };
  if (!/^[\x20-\x7e]+$/.test(key)) return { ok: false, detail: "Idempotency-Key must be printable ASCII" };
  return { ok: true, key };
}

/**
 * The body in a canonical form (src/util/canonical-json.ts), so that two serialisations of one
 * JSON value hash alike: members sorted at every depth, `ignore`d top-level members left out. A
 * body that is empty, not declared JSON, or not JSON is used as it is. Integers beyond 2^53 are
 * taken (rounded, as they always were: a refusal would turn a stored key's retry into a 400);
 * bytes that are not UTF-8 are read as U+FFFD, and a leading BOM is dropped.
 */
export function canonicalBody(bytes: Uint8Array, contentType: string | null, ignore: readonly string[]): Uint8Array {
  if (bytes.length === 0 || !/json/i.test(contentType ?? "")) return bytes;
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return bytes;
  }
  return new TextEncoder().encode(canonicalJson(value, { ignore }));
}

/**
 * What makes two requests "the same request": method, the path and query the origin is asked for
 * (`?amount=1` and `?amount=1000` are two requests), principal, and the body (its canonical form,
 * or a derived key's fields' encoding), which is hashed into the tuple.
 */
type SameRequest = [method: string, path: string, query: string, principal: string, body: Uint8Array];

/** {@link SameRequest} as the JSON text both hashes below are taken of. */
async function sameRequest(...[method, path, query, principal, body]: SameRequest): Promise<string> {
  return JSON.stringify([method, path, query, principal, await sha256Hex(body)]);
}

/** The fingerprint stored beside a key: 128 bits of the SHA-256 of {@link sameRequest}. */
export async function fingerprint(...request: SameRequest): Promise<string> {
  return hashIdentifier(await sameRequest(...request));
}

/**
 * The key of a request that brought none (`derive = true`): the whole SHA-256 of
 * {@link sameRequest}, so the same request gets the same key (and its fingerprint is the key's
 * first 32 hex digits).
 */
export async function derivedKey(...request: SameRequest): Promise<string> {
  return sha256Hex(await sameRequest(...request));
}
