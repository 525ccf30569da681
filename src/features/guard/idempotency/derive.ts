import { Problem } from "../../../problem.js";
import { PROBLEMS } from "../../../problem-types.js";
import { canonicalJson } from "../../../util/canonical-json.js";
import { sha256Hex } from "../../../util/digest.js";
import { resolvePointer } from "./json-pointer.js";

/** `derive = { fields, window }`: which body fields make a request the same request. */
export interface DeriveFields {
  /** RFC 6901 pointers into the JSON body, e.g. "/user_id". */
  fields: readonly string[];
  /** How long (ms) the first request's answer is kept: requests agreeing on the fields within it are one key. */
  window: number;
}

/** What a fields-derived key is made of: the request's method, path and query, and its fields' canonical encoding. */
export interface DerivedFromFields {
  key: string;
  /** The canonical encoding of the fields' values: the request's fingerprint, in place of its whole body. */
  canonical: Uint8Array;
}

/**
 * The key of a request on a route that derives keys from body fields: the same method, path,
 * query and field values give the same key, whatever `Idempotency-Key` the request carries or
 * lacks. Throws a 400 problem naming the first field the body lacks, or saying the body is not
 * JSON. The values only leave this function hashed.
 */
export async function keyFromFields(
  request: { method: string; path: string; query: string },
  body: Uint8Array,
  derive: DeriveFields,
): Promise<DerivedFromFields> {
  const doc = parseJson(body);
  const values = derive.fields.map((field) => {
    const found = resolvePointer(doc, field);
    if (!found.found) throw fieldsMissing(`the JSON body has no ${field}, which this route's keys are made of`, field);
    return canonicalValue(found.value, field);
  });
  const encoding = `[${values.join(",")}]`;
  const key = await sha256Hex(JSON.stringify(["fields", request.method, request.path, request.query, encoding]));
  return { key, canonical: new TextEncoder().encode(encoding) };
}

function parseJson(body: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(body));
  } catch {
    throw fieldsMissing("the body is not JSON: this route's keys are made of fields of a JSON body");
  }
}

/**
 * A field's value in one spelling per value, type and all (src/util/canonical-json.ts): `1` and
 * `"1"` differ, `1.0` and `1` do not (one number), object members are sorted by name at every
 * depth. An integer beyond 2^53 is refused (a whole body's is not: key.ts canonicalBody): JSON.parse
 * rounds it, so two different ids could read as one, and two orders as one.
 *
 * @example canonicalValue({ b: "1", a: 1 }, "/x") // '{"a":1,"b":"1"}'
 */
export function canonicalValue(v: unknown, field: string): string {
  return canonicalJson(v, {
    onUnsafeInteger: () => {
      throw fieldsMissing(
        `${field} holds a number too large to compare exactly (beyond 2^53): send it as a string`,
        field,
      );
    },
  });
}

function fieldsMissing(detail: string, field?: string): Problem {
  return new Problem({
    type: PROBLEMS.idempotencyFieldsMissing,
    detail,
    ...(field === undefined ? {} : { extensions: { field } }),
  });
}
