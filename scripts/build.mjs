// @ts-check
/**
 * `npm run build`: the npm package in dist/, from the public entries (ENTRIES below).
 *   dist/<entry>.js  ESM (esbuild), one file per subpath of package.json's `exports` and the
 *                    chunks they share (dist/chunks/): src/ bundled, lua/*.lua inlined as string
 *                    constants (comment lines blanked), every package import (hono, zod) left as
 *                    an import
 *   dist/...d.ts     the declarations (tsc, tsconfig.build.json), one per module, laid out as src/
 * Then it checks what it wrote: an import of an undeclared package, a `.lua` module left in the
 * JS or the types, or a subpath of `exports` naming a file not written fails the build rather
 * than the consumer's.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));

/** @param {string} message */
function fail(message) {
  console.error(`build: ${message}`);
  process.exit(1);
}

// a stale module from an earlier layout of src/ would otherwise ship with the new ones
rmSync(dist, { recursive: true, force: true });

/** The subpaths: what an app imports ("sluice", "sluice/rate-limit", ...), each its own entry, so it carries only that. */
const ENTRIES = [
  { in: "src/index.ts", out: "index" },
  { in: "src/middleware/rate-limit.ts", out: "rate-limit" },
  { in: "src/middleware/limiter.ts", out: "limiter" },
  { in: "src/middleware/idempotency.ts", out: "idempotency" },
  { in: "src/middleware/session.ts", out: "session" },
  { in: "src/middleware/breaker.ts", out: "breaker" },
  { in: "src/middleware/access.ts", out: "access" },
  { in: "src/middleware/admin-api.ts", out: "admin" },
  { in: "src/gateway/app.ts", out: "gateway" },
];

/**
 * The Lua scripts as text, their comment lines blank (kept as lines, so that a Redis error's
 * line number still points into lua/): a consumer's minifier cannot shorten a string, and the
 * comments are a fifth of decide.lua's weight. A comment is a line that starts with `--` (a
 * `--[[` block runs to its `]]`); the scripts put none after code, where a string could hold `--`.
 * @type {import("esbuild").Plugin}
 */
const luaText = {
  name: "lua-text",
  setup(b) {
    b.onLoad({ filter: /\.lua$/ }, (args) => {
      let block = false;
      const lines = readFileSync(args.path, "utf8")
        .split("\n")
        .map((line) => {
          const code = line.trim();
          if (block) {
            if (code.startsWith("]]") || code.endsWith("]]")) block = false;
            return "";
          }
          if (code.startsWith("--[[")) {
            block = !code.endsWith("]]");
            return "";
          }
          return code.startsWith("--") ? "" : code;
        });
      return { contents: lines.join("\n"), loader: "text" };
    });
  },
};

const result = await build({
  absWorkingDir: root,
  entryPoints: ENTRIES,
  outdir: "dist",
  // what two entries share is one chunk, so an app importing two subpaths loads it once
  splitting: true,
  chunkNames: "chunks/[name]-[hash]",
  bundle: true,
  format: "esm",
  // Workers, Node and bundlers alike: no Node built-ins are assumed, none are shimmed
  platform: "neutral",
  target: "es2022",
  // the consumer's bundler minifies; a readable dist/ is what a stack trace points into
  minify: false,
  // the Lua scripts become string constants, so a consumer needs no wrangler Text rule
  plugins: [luaText],
  // peers (hono, @upstash/redis) must be the app's own copies, and zod is a dependency (its types
  // are in the public SluiceConfig): one copy each, resolved by the consumer's bundler
  packages: "external",
  metafile: true,
  logLevel: "warning",
});

// esbuild's split entries and chunks also import every chunk they reach by a bare `import "./chunks/x.js"`,
// which only orders evaluation; with "sideEffects": false an app's bundler drops each of them and
// warns ("Ignoring this import ...") once per chunk. Every binding a module uses comes with a named
// import (nothing in src/ runs for its effect at import), so they go here rather than in every build.
const bareChunkImport = /^import "\.\.?\/(?:chunks\/)?[^"]+\.js";\n/gm;
for (const file of Object.keys(result.metafile.outputs).filter((f) => f.endsWith(".js"))) {
  const path = join(root, file);
  writeFileSync(path, readFileSync(path, "utf8").replace(bareChunkImport, ""));
}

const declared = new Set([...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.peerDependencies ?? {})]);
/** "@scope/name/sub" or "name/sub" -> the package's name */
const packageOf = (/** @type {string} */ spec) =>
  spec
    .split("/")
    .slice(0, spec.startsWith("@") ? 2 : 1)
    .join("/");
for (const output of Object.values(result.metafile.outputs)) {
  for (const { path, external } of output.imports) {
    if (!external) continue; // a chunk of this build
    if (path.endsWith(".lua")) fail(`${path} was left as an import: the Lua scripts must be inlined`);
    if (!declared.has(packageOf(path)))
      fail(`dist imports "${path}", which is neither a dependency nor a peer dependency`);
  }
}

// Declarations only (esbuild wrote the JS). tsconfig.build.json's noCheck: `npm run typecheck`
// (and `npm test`) type-check src/ already; the build only has to write the types out.
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
try {
  execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.build.json")], { cwd: root, stdio: "inherit" });
} catch {
  fail("tsc could not write the declarations");
}

/** @param {string} dir @returns {string[]} */
const filesUnder = (dir) =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)],
  );
const written = filesUnder(dist);
const declarations = written.filter((f) => f.endsWith(".d.ts"));
// an exported type that mentions a Lua import would send the consumer's tsc looking for lua/
const luaImport = /(?:from\s+|import\s*\(\s*|require\s*\(\s*)["'][^"']*\.lua["']/;
for (const file of written) {
  if (luaImport.test(readFileSync(file, "utf8"))) fail(`${relative(root, file)} imports a .lua module`);
}
// every subpath of package.json's `exports` names files this build wrote
for (const [subpath, conditions] of Object.entries(pkg.exports ?? {})) {
  for (const file of Object.values(/** @type {Record<string, string>} */ (conditions))) {
    if (!existsSync(join(root, file))) fail(`exports["${subpath}"] names ${file}, which the build did not write`);
  }
}

const kb = (/** @type {number} */ n) => `${(n / 1024).toFixed(1)} kB`;
const jsSize = written.filter((f) => f.endsWith(".js")).reduce((sum, f) => sum + statSync(f).size, 0);
const typesSize = declarations.reduce((sum, f) => sum + statSync(f).size, 0);
console.log(
  `dist: ${ENTRIES.length} entries, ${kb(jsSize)} of JS; ${declarations.length} declaration files, ${kb(typesSize)}`,
);
