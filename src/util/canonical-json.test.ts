import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalJson } from "./canonical-json.js";

/**
 * The two canonical forms this one replaced, as they were (src/features/idempotency/key.ts
 * `canonicalJson` with `canonicalBody`'s `ignore`, and derive.ts `canonicalValue`): the reference
 * the one function must agree with, byte for byte, on every value either accepted, so that no
 * stored fingerprint and no derived key changes on upgrade.
 */
function formerBody(value: unknown, ignore: readonly string[]): string {
  if (value && typeof value === "object" && !Array.isArray(value))
    for (const f of ignore) delete (value as Record<string, unknown>)[f];
  const write = (v: unknown): string => {
    if (Array.isArray(v)) return `[${v.map(write).join(",")}]`;
    if (v && typeof v === "object") {
      const entries = Object.keys(v as object)
        .sort()
        .map((k) => `${JSON.stringify(k)}:${write((v as Record<string, unknown>)[k])}`);
      return `{${entries.join(",")}}`;
    }
    return JSON.stringify(v) ?? "null";
  };
  return write(value);
}

function formerFields(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(formerFields).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const members = Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${formerFields((v as Record<string, unknown>)[k])}`);
    return `{${members.join(",")}}`;
  }
  if (typeof v === "number" && Number.isInteger(v) && !Number.isSafeInteger(v)) throw new RangeError("unsafe");
  return JSON.stringify(v);
}

const refuse = (): never => {
  throw new RangeError("unsafe");
};

/** Member names that sort unlike JS's own property order, or that JS treats specially. */
const NAMES = fc.oneof(
  fc.string({ unit: "binary", maxLength: 6 }),
  fc.constantFrom("__proto__", "constructor", "10", "9", "0", "-1", "1.5", "é", "e\u0301", "\ud800", "😀", "", "a"),
);

/** JSON values as JSON.parse gives them: any string, any double (and integers past 2^53), objects with awkward names. */
const json: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    fc.constant(null),
    fc.boolean(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.integer(),
    fc.constantFrom(2 ** 53, 2 ** 53 + 2, -(2 ** 60), 1e21, 12345678901234567000, -0, 5e-324),
    fc.string({ unit: "binary", maxLength: 8 }),
    fc.constantFrom("\u00e9", "e\u0301", "\ufb01", "\ud83d", "\u2028", "\u007f", '"\\'),
    fc.array(tie("value"), { maxLength: 4 }),
    tie("object"),
  ),
  object: fc
    .array(fc.tuple(NAMES, tie("value")), { maxLength: 5 })
    .map(
      (members) =>
        JSON.parse(`{${members.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(",")}}`) as unknown,
    ),
})).value;

/** A JSON text of `v` with its members in another order at every depth (another client's serialiser). */
function reordered(v: unknown, seed: number): string {
  if (Array.isArray(v)) return `[${v.map((e) => reordered(e, seed)).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const names = Object.keys(v);
    const shift = names.length === 0 ? 0 : seed % names.length;
    const turned = [...names.slice(shift), ...names.slice(0, shift)].reverse();
    return `{${turned.map((k) => `${JSON.stringify(k)}: ${reordered((v as Record<string, unknown>)[k], seed)}`).join(", ")}}`;
  }
  return JSON.stringify(v) ?? "null";
}

const parsedAgain = (v: unknown): unknown => JSON.parse(JSON.stringify(v) ?? "null");

describe("canonicalJson", () => {
  it("writes every value exactly as the whole-body form did, with and without ignore", () => {
    fc.assert(
      fc.property(json, fc.array(NAMES, { maxLength: 3 }), (v, ignore) => {
        expect(canonicalJson(v)).toBe(formerBody(parsedAgain(v), []));
        expect(canonicalJson(v, { ignore })).toBe(formerBody(parsedAgain(v), ignore));
      }),
      { numRuns: 500 },
    );
  });

  it("writes every value exactly as the fields form did, and refuses what it refused", () => {
    fc.assert(
      fc.property(json, (v) => {
        let former: string | RangeError;
        try {
          former = formerFields(v);
        } catch (e) {
          former = e as RangeError;
        }
        if (typeof former === "string") expect(canonicalJson(v, { onUnsafeInteger: refuse })).toBe(former);
        else expect(() => canonicalJson(v, { onUnsafeInteger: refuse })).toThrow(RangeError);
      }),
      { numRuns: 500 },
    );
  });

  it("gives one spelling whatever the member order and white space of the text it was parsed from", () => {
    fc.assert(
      fc.property(json, fc.nat(), (v, seed) => {
        expect(canonicalJson(JSON.parse(reordered(v, seed)))).toBe(canonicalJson(v));
      }),
      { numRuns: 300 },
    );
  });

  it("is JSON that parses back to the value (so two values that differ never share a spelling)", () => {
    fc.assert(
      fc.property(json, (v) => {
        const text = canonicalJson(v);
        expect(JSON.parse(text)).toEqual(parsedAgain(v));
        // and it is its own canonical form
        expect(canonicalJson(JSON.parse(text))).toBe(text);
      }),
      { numRuns: 300 },
    );
  });

  it("leaves out only the top level's ignored members", () => {
    expect(canonicalJson({ ts: 1, a: { ts: 2 }, b: [{ ts: 3 }] }, { ignore: ["ts"] })).toBe(
      '{"a":{"ts":2},"b":[{"ts":3}]}',
    );
    expect(canonicalJson([{ ts: 1 }], { ignore: ["ts"] })).toBe('[{"ts":1}]');
    expect(canonicalJson("ts", { ignore: ["ts"] })).toBe('"ts"');
  });

  it("states its rules: code-unit order, numbers as read, strings unnormalised", () => {
    expect(canonicalJson({ 9: 0, 10: 0, a: 0, Z: 0 })).toBe('{"10":0,"9":0,"Z":0,"a":0}');
    expect(canonicalJson(JSON.parse("[1.0, 1e0, -0, 1e400, 12345678901234567890]"))).toBe(
      "[1,1,0,null,12345678901234567000]",
    );
    expect(canonicalJson(["\u00e9", "e\u0301", "\ud800", "\u2028", "\u0000"])).toBe(
      '["\u00e9","e\u0301","\\ud800","\u2028","\\u0000"]',
    );
    expect(() => canonicalJson({ id: 2 ** 60 }, { onUnsafeInteger: refuse })).toThrow(RangeError);
    expect(canonicalJson({ id: 2 ** 60 })).toBe('{"id":1152921504606847000}');
  });
});
