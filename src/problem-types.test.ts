/**
 * Problem types (docs/configuration.md, Responses): every problem sluice answers with has a page under
 * `/__sluice/problems/`, open to anyone, and `type` follows the configured `problem_base`.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { adminApp } from "./admin/index.js";
import { loadConfig } from "./config/index.js";
import type { Env } from "./env.js";
import { DEFAULT_PROBLEM_BASE, problem } from "./problem.js";
import { PROBLEMS, problemSlug } from "./problem-types.js";
import { PROBLEM_TYPES } from "./problem-pages.js";
import { Runtime } from "./runtime.js";

const SLUICE = { key_prefix: "u", routes: [] };
const ENV: Env = { ORIGIN_URL: "https://origin.example/", SLUICE };

async function get(path: string, env: Env = ENV) {
  const res = await adminApp(new Runtime()).request(`http://sluice.test${path}`, {}, env);
  return { status: res.status, type: res.headers.get("content-type") ?? "", text: await res.text() };
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith(".ts") && !e.name.endsWith(".test.ts") ? [path] : [];
  });
}

/** The source files of src/ but the catalogue itself, with their text. */
function sourcesBesideCatalogue(): [string, string][] {
  return sources("src")
    .filter((file) => !file.endsWith("problem-types.ts"))
    .map((file): [string, string] => [file, readFileSync(file, "utf8")]);
}

/** Every problem type named in src/: as `PROBLEMS.<name>`, the only way a problem is made. */
function emittedTypes(): string[] {
  const names = new Set<string>();
  for (const [, text] of sourcesBesideCatalogue()) {
    for (const m of text.matchAll(/PROBLEMS\.(\w+)/g)) names.add(m[1] as string);
  }
  return [...names].sort();
}

/** Where src/ writes a problem's title itself, instead of naming its constant. */
function writtenTitles(): string[] {
  const titles = Object.values(PROBLEMS).map((t) => t.title);
  const found: string[] = [];
  for (const [file, text] of sourcesBesideCatalogue()) {
    for (const m of text.matchAll(/\btitle:\s*["'`]([^"'`]*)/g)) found.push(`${file}: title: ${m[1]}`);
    for (const title of titles) {
      for (const q of ['"', "'", "`"]) if (text.includes(q + title + q)) found.push(`${file}: ${q}${title}${q}`);
    }
  }
  return found;
}

describe("problem types", () => {
  it("has a page for every problem type sluice emits", async () => {
    const emitted = emittedTypes();
    // the scan finds the familiar ones, so a pattern that stopped matching does not pass quietly
    expect(emitted).toEqual(expect.arrayContaining(["tooManyRequests", "forbidden", "requestInFlight", "badGateway"]));
    expect(emitted.length).toBeGreaterThan(25);
    // every constant named is in the catalogue, and the catalogue holds no type that nothing emits
    expect(emitted).toEqual(Object.keys(PROBLEMS).sort());
    for (const name of emitted) {
      const { title } = PROBLEMS[name as keyof typeof PROBLEMS];
      expect(PROBLEM_TYPES.has(problemSlug(title)), title).toBe(true);
      const page = await get(`/__sluice/problems/${problemSlug(title)}`);
      expect(page.status, title).toBe(200);
      expect(page.type).toContain("text/html");
      expect(page.text).toContain(`<h1>${title.replace(/&/g, "&amp;").replace(/</g, "&lt;")}</h1>`);
      expect(page.text).toContain("What to do");
    }
  });

  it("names problems by their constant: no title is written in src/ outside the catalogue", () => {
    expect(writtenTitles()).toEqual([]);
  });

  it("serves the pages without a token (documentation), and an index of them", async () => {
    const index = await get("/__sluice/problems");
    expect(index.status).toBe(200);
    for (const slug of PROBLEM_TYPES.keys()) expect(index.text).toContain(`href="/__sluice/problems/${slug}"`);
    // with no admin token the rest of the admin API is off
    expect((await get("/__sluice/config")).status).toBe(404);
  });

  it("answers an unknown type with a 404 problem, and never echoes it unescaped", async () => {
    const res = await get("/__sluice/problems/%3Cscript%3Ealert(1)%3C%2Fscript%3E");
    expect(res.status).toBe(404);
    expect(res.type).toBe("application/problem+json");
    expect(JSON.parse(res.text)).toMatchObject({ type: "/__sluice/problems/not-found", status: 404 });
    expect(res.text).not.toContain("<script>");
  });

  it("uses the configured problem_base in admin problems", async () => {
    const env = { ...ENV, SLUICE: { ...SLUICE, problem_base: "https://errors.example.com/sluice/" } };
    const unknown = await get("/__sluice/problems/nope", env);
    expect(JSON.parse(unknown.text).type).toBe("https://errors.example.com/sluice/not-found");
    const off = await get("/__sluice/config", env); // no token: the admin API is off
    expect(JSON.parse(off.text).type).toBe("https://errors.example.com/sluice/not-found");
  });

  it("defaults to the Worker's own path, and validates problem_base", async () => {
    expect(DEFAULT_PROBLEM_BASE).toBe("/__sluice/problems/");
    const body = await problem({ type: PROBLEMS.forbidden, detail: "x" }).json();
    expect(body).toMatchObject({ type: "/__sluice/problems/forbidden" });
    const load = (problem_base: unknown) => loadConfig({ ORIGIN_URL: "https://o.example/", SLUICE: { problem_base } });
    const ok = load(undefined);
    expect(ok.ok && ok.config.problem_base).toBe("/__sluice/problems/");
    for (const good of ["https://errors.example.com/sluice/", "/errors/", "/"]) expect(load(good).ok, good).toBe(true);
    for (const bad of ["errors/", "//evil.example/", "https://errors.example.com/x", "ftp://x.example/", "/a b/"]) {
      const r = load(bad);
      expect(r.ok, bad).toBe(false);
      if (!r.ok) expect(r.error.field).toBe("SLUICE.problem_base");
    }
  });
});
