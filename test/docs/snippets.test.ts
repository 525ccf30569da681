/**
 * Every TypeScript snippet of the README and docs/ compiles as a user's Worker: `strict`, each
 * snippet a module of its own, `sluice` and `sluice/*` from the sources (./compile.ts). A snippet
 * that shows only part of a file on purpose is fenced ` ```ts snippet-partial ` and not compiled;
 * there are few (docs/architecture.md's excerpts of the gateway's own source), and this file keeps
 * their number from growing unnoticed.
 *
 * Also here: what the compiler says about the mistakes the option types exist to catch, read as a
 * user reads it (the message, not only that there is one).
 */
import { readdirSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import { typeCheck, type Diagnostic } from "./compile.js";
import { fencesOf, type Fence } from "./markdown.js";

const PARTIAL = "snippet-partial";
/** The most snippets that may be left uncompiled. */
const MOST_PARTIAL = 2;

const documents = [
  "README.md",
  ...readdirSync("docs")
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];
const snippets = documents.flatMap(fencesOf).filter((f) => ["ts", "typescript", "tsx"].includes(f.lang));
const compiled = snippets.filter((f) => !f.info.split(/\s+/).includes(PARTIAL));
const nameOf = (f: Fence) => `${f.file.replace(/[/.]/g, "_")}_${f.line}.${f.lang === "tsx" ? "tsx" : "ts"}`;

/** Mistakes a user makes, each one file, and the errors they should read. */
const MISTAKES: Record<string, string> = {
  "key-typo.ts": `import { rateLimit } from "sluice";
rateLimit({ limits: [{ name: "a", key: "ipp", rate: 1, period: "1s" }] });`,
  "widened.ts": `import { rateLimit } from "sluice";
const limits = [{ name: "per-ip", rate: 10, period: "1s" }];
rateLimit({ limits });`,
  "defined.ts": `import { defineLimits, limiter, rateLimit, type LimitOptions } from "sluice";
import { adminApi } from "sluice/admin";
const limits = defineLimits([{ name: "per-ip", key: "ip", rate: 10, period: "1s" }]);
rateLimit({ limits });
limiter({ limits: defineLimits([{ name: "per-user", rate: 10, period: "1m" }]) });
adminApi({ config: { routes: [{ name: "api", match: "/api/*", limits }] } });
const satisfied = [{ name: "per-ip", key: ["ip", "path"], rate: 10, period: "1s" }] satisfies LimitOptions[];
rateLimit({ limits: satisfied });
rateLimit({ limits: [{ name: "per-ip", rate: 10, period: "1s" }] as const });
defineLimits([{ name: "b", key: "header:x-api-key", rate: 1, period: "1 second" }]);`,
};

let errors: Map<string, Diagnostic[]>;
beforeAll(() => {
  errors = typeCheck({
    ...Object.fromEntries(compiled.map((f) => [nameOf(f), f.code])),
    ...MISTAKES,
  });
}, 120_000);

describe("the docs' TypeScript snippets", () => {
  it("are found, and few are partial", () => {
    expect(compiled.length).toBeGreaterThanOrEqual(8);
    const partial = snippets.filter((f) => !compiled.includes(f)).map((f) => `${f.file}:${f.line}`);
    expect(partial.length, `partial snippets: ${partial.join(", ")}`).toBeLessThanOrEqual(MOST_PARTIAL);
  });

  it("compile with the libraries' own types", () => {
    expect(errors.get("")).toEqual([]);
  });

  it.each(compiled.map((f) => [`${f.file}:${f.line}`, f] as const))("%s compiles under tsc --strict", (_, fence) => {
    const found = (errors.get(nameOf(fence)) ?? []).map((d) => `${fence.file}:${fence.line + d.line}: ${d.message}`);
    expect(found).toEqual([]);
  });
});

describe("what the compiler says about a mistake in the options", () => {
  it("a mistyped key lists the key parts there are", () => {
    const [error, ...more] = errors.get("key-typo.ts") ?? [];
    expect(more).toEqual([]);
    expect(error?.message).toContain(`Type '"ipp"' is not assignable to type '"ip" | "global" | "path" |`);
    for (const part of ["`header:${string}`", "`query:${string}`", "`cookie:${string}`", "`jwt:${string}`"])
      expect(error?.message).toContain(part);
  });

  it("a limits array widened in a const of its own is named LimitOptions[], down to the field", () => {
    const [error, ...more] = errors.get("widened.ts") ?? [];
    expect(more).toEqual([]);
    expect(error?.message).toContain("is not assignable to type 'readonly LimitOptions[]'");
    expect(error?.message).toContain("Types of property 'period' are incompatible");
    expect(error?.message).not.toContain("Literal<");
    expect(error?.message.length).toBeLessThan(600);
  });

  it("defineLimits() and satisfies keep the literals; a typo in defineLimits() is caught at the array", () => {
    const found = errors.get("defined.ts") ?? [];
    expect(found.map((d) => d.line)).toEqual([10]);
    expect(found[0]?.message).toContain(`Type '"1 second"' is not assignable to type`);
  });
});
