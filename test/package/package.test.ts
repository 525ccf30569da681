/**
 * sluice as an npm package, end to end: `npm run release:check` (`npm publish --dry-run --offline`,
 * whose `prepare` builds dist/), `npm pack`, the tarball installed into
 * a copy of examples/hono-app (offline; see install.ts), the copy type-checked against the
 * packaged declarations, then the example's own tests (its README's `npm test`: wrangler's
 * bundle in workerd) against a real Redis behind the Upstash-REST bridge. dist/ and the tarball
 * are made here, never committed.
 */
import { spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRedisStack, TOKEN, type RedisStack } from "../integration/stack.js";
import { installExample } from "./install.js";

const root = fileURLToPath(new URL("../..", import.meta.url));

/** What src/index.ts exports: the values, then the types. */
const VALUES = [
  "rateLimit",
  "defineLimits",
  "idempotency",
  "session",
  "breaker",
  "accessLists",
  "verifyJwt",
  "limiter",
  "sluice",
  "Runtime",
  "Problem",
  "ConfigError",
  "adminApi",
];
const TYPES = [
  "SluiceEnv",
  "SluiceDecision",
  "SluiceVariables",
  "LimitState",
  "DecidedLimit",
  "LimitSummary",
  "GuardsHeld",
  "SwitchInForce",
  "SluiceConfig",
  "SharedOptions",
  "LimitOptions",
  "RateLimitOptions",
  "LimiterOptions",
  "LimiterResult",
  "IdempotencyOptions",
  "SessionOptions",
  "BreakerOptions",
  "VerifyJwtOptions",
  "AdminApiOptions",
  "AdminConfigInput",
];

/** The subpaths of package.json's `exports` and the values each gives (the root gives all but the gateway's). */
const SUBPATHS: Record<string, string[]> = {
  "sluice/rate-limit": ["rateLimit", "defineLimits"],
  "sluice/limiter": ["limiter"],
  "sluice/idempotency": ["idempotency"],
  "sluice/session": ["session"],
  "sluice/breaker": ["breaker"],
  "sluice/access": ["accessLists", "verifyJwt"],
  "sluice/admin": ["adminApi"],
  "sluice/gateway": ["createApp"],
};

/** A Lua script imported rather than inlined, in JS or in declarations. */
const LUA_IMPORT = /(?:from\s+|import\s*\(\s*)["'][^"']*\.lua["']/;

/**
 * Runs a command to its end and gives its stdout; rejects with all its output when it fails.
 * Async, so the Redis stack starts meanwhile.
 */
function run(command: string, args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<string> {
  return new Promise((done, fail) => {
    const child = spawn(command, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let output = "";
    child.stdout.on("data", (d: Buffer) => ((stdout += d.toString()), (output += d.toString())));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    child.on("error", fail);
    child.on("close", (code) =>
      code === 0 ? done(stdout) : fail(new Error(`${command} ${args.join(" ")} exited ${code}:\n${output}`)),
    );
  });
}

/** A promise awaited later, in its own test: its failure is reported there, not as unhandled. */
function later<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => undefined);
  return promise;
}

const filesUnder = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)],
  );

/** A consumer's module naming every public export (types as types, values as values) for tsc to check. */
const publicApiModule = () =>
  [
    "// Written by test/package/package.test.ts: every public name of sluice, imported as an app would.",
    `import { ${VALUES.join(", ")} } from "sluice";`,
    `import type { ${TYPES.join(", ")} } from "sluice";`,
    ...Object.entries(SUBPATHS).map(
      ([spec, names], i) => `import { ${names.map((n) => `${n} as ${n}${i}`).join(", ")} } from "${spec}";`,
    ),
    'import type { RateLimitOptions as SubpathOptions } from "sluice/rate-limit";',
    `export const values = [${VALUES.join(", ")}] as const;`,
    `export const subpathValues = [${Object.values(SUBPATHS)
      .flatMap((names, i) => names.map((n) => `${n}${i}`))
      .join(", ")}] as const;`,
    "export type SubpathTypes = [SubpathOptions];",
    // a plain Hono app, no environment generic: sluice's variables typed from its declarations alone
    'import { Hono } from "hono";',
    'export const plain = new Hono().get("/", (c) => {',
    '  const verdict: string = c.get("sluice").verdict;',
    // each capability's result is `| undefined` until a step decided it: read with `?.`, or the consumer's tsc fails
    '  const limits: number | undefined = c.get("sluiceLimits")?.outcomes.length;',
    '  const fence: string | undefined = c.get("sluiceGuards")?.sluiceHeaders["sluice-fencing-token"];',
    '  const mode: string | undefined = c.get("sluiceSwitch")?.mode;',
    "  return c.json({ verdict, limits, fence, mode });",
    "});",
    `export type Types = [${TYPES.join(", ")}];`,
    "",
  ].join("\n");

/**
 * The paths `npm publish --dry-run --json` lists. npm 11 keys its report by the package's name
 * (one entry per workspace published); npm 10 gave the one package's report alone.
 */
function publishedFiles(json: string): string[] {
  type Report = { files: Array<{ path: string }> };
  const parsed = JSON.parse(json) as Report | Record<string, Report>;
  const report = "files" in parsed ? (parsed as Report) : (parsed as Record<string, Report>)["sluice"];
  if (!report) throw new Error(`npm publish --dry-run --json reported no "sluice":\n${json}`);
  return report.files.map((f) => f.path);
}

/** decide.lua as the build inlines it: its shebang, then (before any other script's) a line only it has. */
const DECIDE_INLINED = /#!lua flags=allow-key-locking(?:(?!#!lua)[\s\S])*local function arg\(i, name\)/;

describe("the npm package", () => {
  let work: string | undefined;
  let tarball: string;
  let appDir: string;
  let installed: string;
  let stack: RedisStack | undefined;
  let typecheck: Promise<string>;
  let exampleTests: Promise<string>;
  let report: string;
  let published: string[];

  beforeAll(async () => {
    const redis = later(startRedisStack());
    try {
      // Inside the repo (.wrangler/ is ignored by git, lint and tsc), so that the copy of the example
      // finds wrangler, vitest and typescript in the repo's node_modules by Node's own resolution.
      const parent = join(root, ".wrangler", "package-test");
      mkdirSync(parent, { recursive: true });
      work = mkdtempSync(join(parent, "run-"));
      // The release, short of the upload: `npm run release:check` is `npm publish --dry-run --offline`,
      // scripts and all (`prepare` builds dist/), as a maintainer runs it. A dry run needs no login
      // (it warns that nobody is logged in, and goes on); --offline makes sure it asks no registry.
      // --json for the file list; the build's own output then stays off stdout.
      published = publishedFiles(
        await run("npm", ["run", "--silent", "release:check", "--", "--json", "--foreground-scripts=false"], {
          cwd: root,
        }),
      );
      // the build just ran: --ignore-scripts keeps prepare from running it again
      const packed = await run("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", work], {
        cwd: root,
      });
      const [{ filename }] = JSON.parse(packed) as [{ filename: string }];
      tarball = join(work, filename);

      // laid out as in the repo, so the example's `file:../../sluice-<version>.tgz` names the tarball
      appDir = join(work, "examples", "hono-app");
      const source = join(root, "examples", "hono-app");
      cpSync(source, appDir, {
        recursive: true,
        filter: (path) => !/^(node_modules|\.wrangler|package-lock\.json)(\/|$)/.test(relative(source, path)),
      });
      installExample({ repoRoot: root, appDir, tarball });
      installed = join(appDir, "node_modules", "sluice");
      writeFileSync(join(appDir, "src", "public-api.ts"), publicApiModule());
    } finally {
      stack = await redis;
    }

    // The two slow checks run side by side (two cores), each awaited by its test below.
    // skipLibCheck off: the packaged declarations themselves are checked, with Workers' types only
    const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
    typecheck = later(run(process.execPath, [tsc, "-p", appDir, "--skipLibCheck", "false"], { cwd: appDir }));
    report = join(work, "example-tests.json");
    // the nested vitest must not take this one's worker settings for its own
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("VITEST")));
    const vitest = join(root, "node_modules", "vitest", "vitest.mjs");
    exampleTests = later(
      run(process.execPath, [vitest, "run", "--reporter=default", "--reporter=json", `--outputFile.json=${report}`], {
        cwd: appDir,
        env: { ...env, NO_COLOR: "1", UPSTASH_REDIS_REST_URL: stack.bridge.url, UPSTASH_REDIS_REST_TOKEN: TOKEN },
      }),
    );
  }, 120_000);

  afterAll(async () => {
    // a check still running (its test failed first) must not outlive the files it reads
    await Promise.allSettled([typecheck, exampleTests]);
    await stack?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("publishes (a dry run) the built package, its license and its changelog, and nothing of the repo's own", () => {
    for (const file of ["package.json", "README.md", "LICENSE", "CHANGELOG.md", "dist/index.js", "dist/index.d.ts"])
      expect(published).toContain(file);
    // no tests, bench, dev tooling, sources, scripts, installed packages or wrangler's state
    const repoOwn = /^(test|bench|dev|src|lua|scripts|examples|worker|docs|node_modules|\.wrangler|\.ci)\//;
    expect(published.filter((f) => repoOwn.test(f) || f.includes("node_modules/"))).toEqual([]);
    expect(
      published.filter((f) => !/^(dist\/.+\.(js|d\.ts)|package\.json|README\.md|LICENSE|CHANGELOG\.md)$/.test(f)),
    ).toEqual([]);
    // no .lua file: the scripts ship inlined in the JS, decide.lua among them
    expect(published.filter((f) => f.endsWith(".lua"))).toEqual([]);
    const inlined = published
      .filter((f) => f.endsWith(".js"))
      .filter((f) => DECIDE_INLINED.test(readFileSync(join(root, f), "utf8")));
    expect(inlined).not.toEqual([]);
  });

  it("publishes every file package.json names (main, module, types, each subpath of exports)", () => {
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
      main: string;
      module: string;
      types: string;
      exports: Record<string, Record<string, string>>;
    };
    const named = [pkg.main, pkg.module, pkg.types, ...Object.values(pkg.exports).flatMap((c) => Object.values(c))];
    const missing = named.map((f) => f.replace(/^\.\//, "")).filter((f) => !published.includes(f));
    expect(missing).toEqual([]);
  });

  it("publishes a README whose links work from the registry's page: absolute, into the repository", () => {
    // the package has no docs/: a relative link would point into the tarball, at nothing
    const readme = readFileSync(join(installed, "README.md"), "utf8");
    const relative = [...readme.matchAll(/\]\(([^)\s]+)\)/g)]
      .map((m) => m[1] ?? "")
      .filter((target) => !/^(https?:\/\/|#)/.test(target));
    expect(relative).toEqual([]);
    expect(readme).toContain("](https://github.com/sluice-dev/sluice/blob/main/docs/getting-started.md");
  });

  it("is publishable as MIT: `license`, the LICENSE file and no `private`, as installed from the tarball", () => {
    const manifest = JSON.parse(readFileSync(join(installed, "package.json"), "utf8")) as Record<string, unknown>;
    expect(manifest.license).toBe("MIT");
    expect(manifest.private).toBeUndefined();
    expect(manifest.repository).toMatchObject({ type: "git" });
    expect(readFileSync(join(installed, "LICENSE"), "utf8")).toMatch(
      /^MIT License\n\nCopyright \(c\) 2026 sluice contributors\n/,
    );
  });

  it("packs the built package only: dist/, package.json, README.md, LICENSE, CHANGELOG.md", async () => {
    const entries = (await run("tar", ["-tzf", tarball], { cwd: root })).trim().split("\n");
    expect(entries).toContain("package/dist/index.js");
    expect(entries).toContain("package/dist/index.d.ts");
    for (const name of ["rate-limit", "limiter", "idempotency", "session", "breaker", "access", "admin", "gateway"])
      expect(entries).toContain(`package/dist/${name}.js`);
    expect(entries).toContain("package/dist/middleware/rate-limit.d.ts");
    expect(entries).toContain("package/package.json");
    expect(entries).toContain("package/LICENSE");
    expect(entries).toContain("package/CHANGELOG.md");
    expect(
      entries.filter(
        (e) => !/^package\/(dist\/.+\.(js|d\.ts)|package\.json|README\.md|LICENSE|CHANGELOG\.md)$/.test(e),
      ),
    ).toEqual([]);
  });

  it("inlines the Lua scripts: no .lua import in the JS or the types", () => {
    const jsFiles = filesUnder(join(installed, "dist")).filter((f) => f.endsWith(".js"));
    const js = jsFiles.map((f) => readFileSync(f, "utf8")).join("\n");
    // the scripts' own text is there, as string constants
    expect(js).toContain("redis.call('TIME')");
    for (const file of filesUnder(join(installed, "dist"))) {
      expect(LUA_IMPORT.test(readFileSync(file, "utf8")), relative(installed, file)).toBe(false);
    }
    // and nothing that is the app's is bundled: hono and zod stay imports (the rest are dist's own chunks);
    // @upstash/redis is not imported at all (sluice's own REST client; an app's client is taken by its shape)
    const imported = [...js.matchAll(/^import .* from "([^"]+)";$/gm)].map((m) => m[1] ?? "");
    expect(imported.filter((spec) => !spec.startsWith("./"))).not.toEqual([]);
    expect(imported.filter((spec) => !spec.startsWith("./") && !/^(hono|zod)(\/|$)/.test(spec))).toEqual([]);
  });

  it("exports the public values from dist/index.js, as installed", async () => {
    const mod = (await import(pathToFileURL(join(installed, "dist", "index.js")).href)) as Record<string, unknown>;
    for (const name of VALUES) expect(typeof mod[name], name).toBe("function");
  });

  it("resolves each subpath of `exports` from the app, as installed: sluice/rate-limit and the others", async () => {
    // a module of the app's imports them, so Node resolves them through the installed package.json
    const probe = join(appDir, "subpaths.mjs");
    const specs = Object.keys(SUBPATHS);
    writeFileSync(probe, specs.map((spec, i) => `export * as m${i} from "${spec}";`).join("\n") + "\n");
    const mods = (await import(pathToFileURL(probe).href)) as Record<string, Record<string, unknown>>;
    specs.forEach((spec, i) => {
      for (const name of SUBPATHS[spec] ?? [])
        expect(typeof mods[`m${i}`]?.[name], `${spec}: ${name}`).toBe("function");
    });
    // the root is the same code: one rateLimit, whichever way it is imported
    const rootProbe = join(appDir, "root.mjs");
    writeFileSync(rootProbe, 'export * from "sluice";\n');
    const rootMod = (await import(pathToFileURL(rootProbe).href)) as Record<string, unknown>;
    expect(rootMod.rateLimit).toBe(mods.m0?.rateLimit);
    expect(rootMod.createApp).toBeUndefined();
  });

  it("declares the public API in dist/index.d.ts: the example type-checks against it, declarations included", async () => {
    await typecheck;
  });

  it("runs the example's own tests: wrangler's bundle in workerd, against Redis", async () => {
    await exampleTests;
    const result = JSON.parse(readFileSync(report, "utf8")) as { numPassedTests: number; numTotalTests: number };
    // all of them ran: without the Redis bindings they would be skipped, which also exits 0; and
    // none was lost (the route limits, the idempotent orders, the user-keyed limit, limiter() from a
    // route and from the queue consumer, adminApi(), the missing-Redis 500)
    expect(result.numTotalTests).toBeGreaterThanOrEqual(8);
    expect(result.numPassedTests).toBe(result.numTotalTests);
  });
});
