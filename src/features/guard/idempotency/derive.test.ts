import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalValue, keyFromFields } from "./derive.js";
import { isJsonPointer, pointerTokens, resolvePointer } from "./json-pointer.js";
import { Problem } from "../../../problem.js";

/** RFC 6901 §3: "~" is written "~0" and "/" is written "~1" inside a reference token. */
const escapeToken = (t: string) => t.replace(/~/g, "~0").replace(/\//g, "~1");
const pointerOf = (tokens: string[]) => tokens.map((t) => `/${escapeToken(t)}`).join("");

/** JSON values as JSON.parse gives them, without integers JSON cannot carry exactly (canonicalValue refuses those). */
const json: fc.Arbitrary<unknown> = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }).filter((d) => !Number.isInteger(d) || Number.isSafeInteger(d)),
    fc.string({ unit: "grapheme" }),
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(fc.string(), tie("value"), { maxKeys: 4 }),
  ),
})).value;

/** The same object with its members inserted in another order, at every depth. */
function reordered(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(reordered);
  if (v !== null && typeof v === "object")
    return Object.fromEntries(
      Object.entries(v)
        .reverse()
        .map(([k, e]) => [k, reordered(e)]),
    );
  return v;
}

const bytes = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
const REQUEST = { method: "POST", path: "/orders/create", query: "" };
const DERIVE = { fields: ["/user_id", "/sku", "/amount"], window: 300_000 };

describe("JSON pointers (RFC 6901)", () => {
  it("resolves the examples of RFC 6901 §5", () => {
    const doc = {
      foo: ["bar", "baz"],
      "": 0,
      "a/b": 1,
      "c%d": 2,
      "e^f": 3,
      "g|h": 4,
      "i\\j": 5,
      'k"l': 6,
      " ": 7,
      "m~n": 8,
    };
    const cases: Array<[string, unknown]> = [
      ["/foo", ["bar", "baz"]],
      ["/foo/0", "bar"],
      ["/", 0],
      ["/a~1b", 1],
      ["/c%d", 2],
      ["/e^f", 3],
      ["/g|h", 4],
      ["/i\\j", 5],
      ['/k"l', 6],
      ["/ ", 7],
      ["/m~0n", 8],
    ];
    for (const [pointer, value] of cases) expect(resolvePointer(doc, pointer)).toEqual({ found: true, value });
  });

  it("unescapes ~1 before ~0, so ~01 is a literal ~1", () => {
    expect(pointerTokens("/~01")).toEqual(["~1"]);
    expect(resolvePointer({ "~1": "tilde-one", "/": "slash" }, "/~01")).toEqual({ found: true, value: "tilde-one" });
  });

  it("finds nothing where the document has nothing: absent members, indices out of range or not canonical, '-', inherited members", () => {
    const doc = { a: [10, 20], n: null, o: {} };
    for (const p of ["/b", "/a/2", "/a/-", "/a/01", "/a/x", "/n/x", "/o/constructor", "/o/__proto__", "/a/length"])
      expect(resolvePointer(doc, p)).toEqual({ found: false });
    expect(resolvePointer(doc, "/n")).toEqual({ found: true, value: null });
  });

  it("accepts only pointers into the document: a leading '/', '~' only as ~0 or ~1", () => {
    for (const p of ["/a", "/", "/a/0/b", "/~0~1", "//"]) expect(isJsonPointer(p)).toBe(true);
    for (const p of ["", "a", "user_id", "/a~", "/a~2", "#/a"]) expect(isJsonPointer(p)).toBe(false);
  });

  it("any path of member names, escaped, is a pointer that leads back to the value placed there", () => {
    fc.assert(
      fc.property(fc.array(fc.string(), { minLength: 1, maxLength: 5 }), json, (tokens, value) => {
        const doc = tokens.reduceRight<unknown>((inner, t) => ({ [t]: inner }), value);
        const pointer = pointerOf(tokens);
        expect(isJsonPointer(pointer)).toBe(true);
        expect(pointerTokens(pointer)).toEqual(tokens);
        expect(resolvePointer(doc, pointer)).toEqual({ found: true, value });
      }),
    );
  });
});

describe("the canonical encoding of field values", () => {
  it("is type-aware: a number and its string, a boolean and its string, null and 'null' differ", () => {
    const pairs: Array<[unknown, unknown]> = [
      [1, "1"],
      [true, "true"],
      [null, "null"],
      [[1], "[1]"],
      [{ a: 1 }, { a: "1" }],
      [0, false],
    ];
    for (const [x, y] of pairs) expect(canonicalValue(x, "/f")).not.toBe(canonicalValue(y, "/f"));
    expect(canonicalValue(1.0, "/f")).toBe(canonicalValue(1, "/f")); // one JSON number
  });

  it("does not depend on the order of object members, at any depth", () => {
    fc.assert(
      fc.property(json, (v) => {
        expect(canonicalValue(reordered(v), "/f")).toBe(canonicalValue(v, "/f"));
      }),
    );
  });

  it("is one-to-one: the encoding parses back to the value it encodes", () => {
    fc.assert(
      fc.property(json, (v) => {
        expect(JSON.parse(canonicalValue(v, "/f"))).toEqual(JSON.parse(JSON.stringify(v)));
      }),
    );
  });

  it("refuses integers beyond 2^53, which JSON.parse rounds (two ids would read as one)", () => {
    expect(() => canonicalValue({ id: 2 ** 60 }, "/user")).toThrow(/\/user holds a number too large/);
    expect(canonicalValue(Number.MAX_SAFE_INTEGER, "/n")).toBe(String(Number.MAX_SAFE_INTEGER));
  });
});

describe("keys from body fields", () => {
  it("agrees for requests that agree on the fields, whatever else the body holds and in whatever order", async () => {
    const one = await keyFromFields(REQUEST, bytes({ user_id: 7, sku: "a", amount: 19.99, note: "x" }), DERIVE);
    const two = await keyFromFields(REQUEST, bytes({ amount: 19.99, note: "y", sku: "a", user_id: 7 }), DERIVE);
    expect(two.key).toBe(one.key);
    expect(new TextDecoder().decode(one.canonical)).toBe('[7,"a",19.99]');
    expect(one.key).toMatch(/^[0-9a-f]{64}$/);
  });

  it("differs when a field's value, or its type, differs, and by method and path", async () => {
    const base = await keyFromFields(REQUEST, bytes({ user_id: 7, sku: "a", amount: 1 }), DERIVE);
    const others = await Promise.all([
      keyFromFields(REQUEST, bytes({ user_id: "7", sku: "a", amount: 1 }), DERIVE),
      keyFromFields(REQUEST, bytes({ user_id: 7, sku: "a", amount: 2 }), DERIVE),
      keyFromFields({ ...REQUEST, path: "/refunds/create" }, bytes({ user_id: 7, sku: "a", amount: 1 }), DERIVE),
      keyFromFields({ ...REQUEST, method: "PUT" }, bytes({ user_id: 7, sku: "a", amount: 1 }), DERIVE),
    ]);
    expect(new Set([base.key, ...others.map((o) => o.key)]).size).toBe(5);
  });

  it("does not let one field's value spill into the next (field boundaries are part of the encoding)", async () => {
    await fc.assert(
      fc.asyncProperty(fc.string(), fc.string(), fc.string(), fc.string(), async (a, b, c, d) => {
        fc.pre(a !== c || b !== d);
        const derive = { fields: ["/x", "/y"], window: 60_000 };
        const k1 = await keyFromFields(REQUEST, bytes({ x: a, y: b }), derive);
        const k2 = await keyFromFields(REQUEST, bytes({ x: c, y: d }), derive);
        expect(k1.key).not.toBe(k2.key);
      }),
      { numRuns: 200 },
    );
  });

  it("refuses a body without a field with a 400 naming the field, and a body that is not JSON", async () => {
    const missing = await keyFromFields(REQUEST, bytes({ user_id: 7, amount: 1 }), DERIVE).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(Problem);
    expect((missing as Problem).status).toBe(400);
    expect((missing as Problem).init).toMatchObject({ extensions: { field: "/sku" } });
    expect((missing as Problem).init.detail).toContain("/sku");
    for (const body of ["", "user_id=7", "{", "\xff"]) {
      const notJson = await keyFromFields(REQUEST, new TextEncoder().encode(body), DERIVE).catch((e: unknown) => e);
      expect((notJson as Problem).status).toBe(400);
      expect((notJson as Problem).init.type).toMatchObject({ title: "Idempotency fields missing" });
    }
    const array = await keyFromFields(REQUEST, bytes([7, "a", 1]), DERIVE).catch((e: unknown) => e);
    expect((array as Problem).init.extensions).toEqual({ field: "/user_id" });
  });
});
