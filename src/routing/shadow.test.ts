/**
 * Whether a route can ever match first (issue 30, point 6): the claim "shadowed" must never be a
 * false alarm, and is meant to be exact. Held by examples and by a property: on random route lists
 * over a small alphabet, `shadowedBy` says exactly what asking `findRoute` every method and path
 * of a universe that stands for all of them says.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { compilePattern } from "./match.js";
import { normalisePath, DEFAULT_PATH_POLICY, type PathPolicy } from "./normalise.js";
import { findRoute, type RoutableRoute } from "./route.js";
import { shadowBudget, shadowedBy } from "./shadow.js";

const STRICT: PathPolicy = { ...DEFAULT_PATH_POLICY, trailing_slash: "strict" };

function routes(specs: Array<[string, string[]?]>, policy: PathPolicy = DEFAULT_PATH_POLICY): RoutableRoute[] {
  return specs.map(([match, methods], i) => ({ name: `r${i}`, pattern: compilePattern(match, policy), methods }));
}

/** The names of the routes that shadow the last one, or undefined. */
function takersOfLast(specs: Array<[string, string[]?]>, policy: PathPolicy = DEFAULT_PATH_POLICY) {
  const list = routes(specs, policy);
  return shadowedBy(list, list.length - 1, policy.trailing_slash === "strict")?.map((r) => r.name);
}

describe("a route no request ever meets first", () => {
  it.each([
    ["a catch-all before it", [["/api/*"], ["/api/products/*", ["GET"]]], ["r0"]],
    ["a route of every method", [["/*"], ["/x", ["POST"]]], ["r0"]],
    [
      "its methods among the earlier's",
      [
        ["/api/*", ["GET", "POST"]],
        ["/api/x", ["GET"]],
      ],
      ["r0"],
    ],
    [
      "HEAD, which a GET route takes",
      [
        ["/x", ["GET"]],
        ["/x", ["HEAD"]],
      ],
      ["r0"],
    ],
    ["a * segment", [["/*/b"], ["/a/b"]], ["r0"]],
    [
      "two routes of a method each",
      [
        ["/x", ["GET"]],
        ["/x", ["POST"]],
        ["/x", ["GET", "POST"]],
      ],
      ["r0", "r1"],
    ],
    ["a path and what lies below it, apart", [["/a"], ["/a/*/*"], ["/a/*"]], ["r0", "r1"]],
    ["the same path spelled otherwise", [["/API/x/"], ["/api//x"]], ["r0"]],
  ] as Array<[string, Array<[string, string[]?]>, string[]]>)("is shadowed by %s", (_what, specs, takers) => {
    expect(takersOfLast(specs)).toEqual(takers);
  });

  it.each([
    ["a narrower route before it", [["/api/products/*", ["GET"]], ["/api/*"]]],
    [
      "another method",
      [
        ["/x", ["GET"]],
        ["/x", ["POST"]],
      ],
    ],
    ["a route of every method after one of one method", [["/x", ["GET"]], ["/x"]]],
    ["a method no earlier route names", [["/x", ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]], ["/x"]]],
    ["a segment the earlier * does not reach", [["/*/b"], ["/a/*"]]],
    ["the path itself, which an earlier prefix one level down misses", [["/a/*/*"], ["/a/*"]]],
    [
      "HEAD after a POST route",
      [
        ["/x", ["POST"]],
        ["/x", ["HEAD"]],
      ],
    ],
    ["nothing before it", [["/x"]]],
  ] as Array<[string, Array<[string, string[]?]>]>)("is not shadowed by %s", (_what, specs) => {
    expect(takersOfLast(specs)).toBeUndefined();
  });

  it("claims nothing once the configuration's budget is spent (it runs where the configuration loads)", () => {
    const list = routes([["/api/*"], ["/api/products/*", ["GET"]]]);
    expect(shadowedBy(list, 1, false, { left: 0 })).toBeUndefined();
    const budget = shadowBudget();
    expect(shadowedBy(list, 1, false, budget)?.map((r) => r.name)).toEqual(["r0"]);
    expect(budget.left).toBeLessThan(shadowBudget().left);
  });

  it('tells a trailing slash apart only under trailing_slash = "strict"', () => {
    expect(takersOfLast([["/a"], ["/a/"]])).toEqual(["r0"]);
    expect(takersOfLast([["/a"], ["/a/"]], STRICT)).toBeUndefined();
    expect(takersOfLast([["/a/"], ["/a"]], STRICT)).toBeUndefined();
    expect(takersOfLast([["/a"], ["/a/"], ["/a/*"]], STRICT)).toBeUndefined(); // /a/x reaches it
    expect(takersOfLast([["/a"], ["/a/"], ["/a/*/*"], ["/a/*"]], STRICT)).toEqual(["r0", "r1", "r2"]);
  });
});

// The property: a universe of methods and paths that stands for all of them (every literal of the
// alphabet and one more segment, every method named and one more, lengths up to one past the
// longest pattern, both slashes under strict), asked of findRoute one by one.
const SEGMENTS = ["a", "b", "c", "*"];
const METHODS = ["GET", "POST", "HEAD", "PUT"];

const spec = fc.record({
  segments: fc.array(fc.constantFrom(...SEGMENTS), { maxLength: 3 }),
  tail: fc.boolean(),
  slash: fc.boolean(),
  methods: fc.option(fc.uniqueArray(fc.constantFrom(...METHODS), { minLength: 1, maxLength: 3 }), { nil: undefined }),
});

function matchOf(s: { segments: string[]; tail: boolean; slash: boolean }): string {
  const body = [...s.segments, ...(s.tail ? ["*"] : [])].join("/");
  return `/${body}${s.slash && body !== "" ? "/" : ""}`;
}

/** Every path of up to 5 segments over the alphabet and one more letter, with a trailing slash too under strict, in match form. */
function universe(policy: PathPolicy): string[] {
  const letters = ["a", "b", "c", "zz"];
  const raw: string[] = [];
  for (let n = 0; n <= 5; n++)
    for (let k = 0; k < letters.length ** n; k++) {
      const segs = Array.from({ length: n }, (_, i) => letters[Math.floor(k / letters.length ** i) % letters.length]);
      raw.push("/" + segs.join("/"));
      if (policy.trailing_slash === "strict" && n > 0) raw.push("/" + segs.join("/") + "/");
    }
  return raw.flatMap((path) => {
    const normal = normalisePath(path, policy);
    return normal.ok ? [normal.path.match] : [];
  });
}

/** Whether some method and path of the universe meets route `index` first. */
function reachable(list: RoutableRoute[], index: number, paths: readonly string[]): boolean {
  const target = list[index];
  return [...METHODS, "PROPFIND"].some((method) => paths.some((path) => findRoute(list, method, path) === target));
}

describe("shadowedBy against findRoute over every method and path", () => {
  it.each([
    ["ignore", DEFAULT_PATH_POLICY],
    ["strict", STRICT],
  ])("says exactly what findRoute does (trailing_slash = %s)", (_name, policy) => {
    const paths = universe(policy);
    fc.assert(
      fc.property(fc.array(spec, { minLength: 1, maxLength: 4 }), (specs) => {
        const list = specs.map((s, i) => ({
          name: `r${i}`,
          pattern: compilePattern(matchOf(s), policy),
          methods: s.methods,
        }));
        const strict = policy.trailing_slash === "strict";
        for (let i = 0; i < list.length; i++) {
          const claimed = shadowedBy(list, i, strict) !== undefined;
          expect(claimed, JSON.stringify(specs.map(matchOf)) + ` route ${i}`).toBe(i > 0 && !reachable(list, i, paths));
        }
      }),
      { numRuns: 120 },
    );
  });
});
