/**
 * One spelling per JSON value, so that two serialisations of one value hash alike: what an
 * idempotency fingerprint and a derived key hash of a body (src/features/idempotency/key.ts) and
 * of its fields (derive.ts). Their bytes are part of every stored record's fingerprint and every
 * derived key: a rule changed here turns a client's retry into a new request, so these rules are
 * pinned (test/unit/hash-pins.test.ts) and never change.
 *
 * - Object members sorted by name, by UTF-16 code units (`Array.prototype.sort`), at every depth:
 *   `"10"` before `"9"`, `"Z"` before `"a"`; array elements in their order; no white space.
 * - Member names and strings as `JSON.stringify` writes them: `"` and `\` and control characters
 *   escaped, a lone surrogate as `\udXXX`, every other character as itself (U+2028 too); no
 *   Unicode normalisation (`é` and `e` + U+0301 are two strings).
 * - Numbers as `JSON.stringify` writes the double `JSON.parse` read: `1.0`, `1e0` and `1` are `1`,
 *   `-0` is `0`, `1e400` (Infinity) is `null`; an integer beyond 2^53 was rounded by the parse and
 *   is written rounded, unless `onUnsafeInteger` refuses it.
 * - `true`, `false`, `null` as themselves.
 * - `ignore`: members of a top-level object left out, as if absent (nested members of the same
 *   name are kept; a top-level array or scalar is untouched).
 *
 * The value is one `JSON.parse` gave; anything else (`undefined`, a function) is written `null`.
 */

export interface CanonicalOptions {
  /** Top-level object members left out (timestamps, nonces: what makes one request two). */
  ignore?: readonly string[];
  /** Called for an integer beyond 2^53, in place of writing it (it throws: two ids would read as one). */
  onUnsafeInteger?: (n: number) => never;
}

/**
 * The canonical JSON text of `value`.
 *
 * @example canonicalJson({ b: "1", a: [1.0, { d: null, c: true }] }) // '{"a":[1,{"c":true,"d":null}],"b":"1"}'
 * @example canonicalJson({ ts: 5, id: 7 }, { ignore: ["ts"] }) // '{"id":7}'
 */
export function canonicalJson(value: unknown, options: CanonicalOptions = {}): string {
  const { ignore = [], onUnsafeInteger } = options;
  const write = (v: unknown, top: boolean): string => {
    if (Array.isArray(v)) return `[${v.map((e) => write(e, false)).join(",")}]`;
    if (v !== null && typeof v === "object") {
      const names = Object.keys(v).filter((k) => !top || !ignore.includes(k));
      const members = names
        .sort()
        .map((k) => `${JSON.stringify(k)}:${write((v as Record<string, unknown>)[k], false)}`);
      return `{${members.join(",")}}`;
    }
    if (onUnsafeInteger && typeof v === "number" && Number.isInteger(v) && !Number.isSafeInteger(v)) onUnsafeInteger(v);
    return (JSON.stringify(v) as string | undefined) ?? "null";
  };
  return write(value, true);
}
