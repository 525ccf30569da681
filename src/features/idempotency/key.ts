import { hashIdentifier } from "../../identity/hash.js";

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
 * The body in a canonical form, so that two serialisations of one JSON value hash alike: object
 * keys sorted at every depth, `ignore`d top-level fields dropped. A body that is not JSON is used
 * as it is.
 */
export function canonicalBody(bytes: Uint8Array, contentType: string | null, ignore: readonly string[]): Uint8Array {
  if (bytes.length === 0 || !/json/i.test(contentType ?? "")) return bytes;
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return bytes;
  }
  if (value && typeof value === "object" && !Array.isArray(value))
    for (const f of ignore) delete (value as Record<string, unknown>)[f];
  return new TextEncoder().encode(canonicalJson(value));
}

function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  if (v && typeof v === "object") {
    const entries = Object.keys(v as object)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`);
    return `{${entries.join(",")}}`;
  }
  return JSON.stringify(v) ?? "null";
}

/** SHA-256 of bytes, hex. */
export async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return [...d].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * What makes two requests "the same request": method, the path and query the origin is asked for
 * (`?amount=1` and `?amount=1000` are two requests), principal, canonical body.
 */
export async function fingerprint(
  method: string,
  path: string,
  query: string,
  principal: string,
  body: Uint8Array,
): Promise<string> {
  return hashIdentifier(JSON.stringify([method, path, query, principal, await sha256Hex(body)]));
}
