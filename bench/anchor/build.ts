/**
 * Builds the two Workers of the "against @upstash/ratelimit" section the way a user deploys them:
 * sluice's from the built package (`npm run build`, imported as `sluice/rate-limit`), then
 * `wrangler deploy --dry-run --minify --outdir <dir>` with a small wrangler config of its own per
 * Worker (generated under .wrangler/bench-anchor/), and measures the upload as wrangler's own size
 * line does ("Total Upload: x KiB / gzip: y KiB": every module of the upload, the .lua text modules
 * included, gzipped together), but with the modules in a fixed order: wrangler's order varies from
 * build to build, and its gzip figure of the same bytes with it (by ±0.4 KiB for sluice's six modules).
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { gzipSync } from "node:zlib";
import type { Cleanup } from "../stack.js";
import { round } from "../stats.js";

export const ANCHOR_BUILD_DIR = resolve(".wrangler/bench-anchor");

export type Side = "anchor" | "sluice";
export const SIDES: readonly Side[] = ["anchor", "sluice"];

/** What wrangler made of one Worker. */
export interface BuiltWorker {
  side: Side;
  /** The Worker's source, relative to the repository. */
  source: string;
  /** The bundle wrangler wrote (its .lua text modules beside it). */
  bundle: string;
  raw_kib: number;
  gzip_kib: number;
  /** wrangler's own figures (its gzip varies a little with its module order). */
  wrangler: { raw_kib: number; gzip_kib: number };
  command: string;
}

/**
 * The tsconfig wrangler bundles with: none of the repository's `paths` (which point `sluice` at
 * src/ for the type-checker), so `sluice/...` resolves as a user's does, through the package's
 * `exports` to the built dist/ (package.json's name makes it the package's own, as an installed
 * `node_modules/sluice` would be).
 */
const BUNDLE_TSCONFIG = join(ANCHOR_BUILD_DIR, "tsconfig.json");

/** The wrangler config a user would write for the Worker: a name, main, a date, and the rule for .lua text. */
export function wranglerConfig(side: Side): Record<string, unknown> {
  return {
    name: `bench-${side}`,
    main: resolve("bench/workers", `${side}.ts`),
    compatibility_date: "2026-04-01",
    rules: [{ type: "Text", globs: ["**/*.lua"], fallthrough: true }],
    // relative to the config (ANCHOR_BUILD_DIR/<side>/wrangler.json): wrangler joins, so no absolute path
    tsconfig: "../tsconfig.json",
    ...(side === "sluice" ? { alias: { [SUBPATH]: packageEntry(SUBPATH) } } : {}),
  };
}

/** What the sluice Worker imports: the subpath a user of `rateLimit` alone imports. */
const SUBPATH = "sluice/rate-limit";

/**
 * The built file the package's `exports` map gives a subpath (`import` condition). The bench
 * workspace has a package.json of its own, so the root package is not `sluice` to it by name: the
 * alias makes wrangler resolve the import exactly as an installed package's `exports` would.
 */
export function packageEntry(subpath: string): string {
  const pkg = JSON.parse(readFileSync(resolve("package.json"), "utf8")) as {
    exports: Record<string, { import: string }>;
  };
  const entry = pkg.exports[`.${subpath.slice("sluice".length)}`];
  if (!entry) throw new Error(`package.json exports no "${subpath}"`);
  return resolve(entry.import);
}

/**
 * `npm run build`: the package as it is published (dist/, the Lua scripts inlined with their
 * comment lines blanked), which the sluice Worker imports; and the tsconfig wrangler bundles with.
 */
export async function buildPackage(cleanup: Cleanup): Promise<void> {
  mkdirSync(ANCHOR_BUILD_DIR, { recursive: true });
  writeFileSync(BUNDLE_TSCONFIG, `${JSON.stringify({ compilerOptions: { target: "ES2022" } }, null, 2)}\n`);
  await runCommand("npm", ["run", "build"], cleanup, "the sluice package");
}

/** wrangler's "Total Upload: 149.86 KiB / gzip: 39.16 KiB" line, in KiB. */
export function parseUploadSize(output: string): { raw_kib: number; gzip_kib: number } {
  const m = /Total Upload:\s*([\d.]+)\s*KiB\s*\/\s*gzip:\s*([\d.]+)\s*KiB/.exec(output);
  if (!m) throw new Error(`no "Total Upload: … KiB / gzip: … KiB" line in wrangler's output:\n${output.slice(-2000)}`);
  return { raw_kib: Number(m[1]), gzip_kib: Number(m[2]) };
}

/** The upload's modules in a fixed order: the bundle first, then the others by name; no source maps. */
export function uploadModules(files: readonly string[], main: string): string[] {
  const others = files.filter((f) => f !== main && !f.endsWith(".map") && f !== "README.md").sort();
  return [main, ...others];
}

/** Raw and gzip (zlib's default level, as wrangler) KiB of the modules wrangler wrote, concatenated. */
function uploadSize(outdir: string, main: string): { raw_kib: number; gzip_kib: number } {
  const bytes = Buffer.concat(uploadModules(readdirSync(outdir), main).map((f) => readFileSync(join(outdir, f))));
  return { raw_kib: round(bytes.length / 1024, 2), gzip_kib: round(gzipSync(bytes).length / 1024, 2) };
}

/** Builds one Worker; the sluice one imports the package that `buildPackage` built. */
export async function buildSide(side: Side, cleanup: Cleanup): Promise<BuiltWorker> {
  const dir = join(ANCHOR_BUILD_DIR, side);
  const outdir = join(dir, "out");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const config = join(dir, "wrangler.json");
  writeFileSync(config, `${JSON.stringify(wranglerConfig(side), null, 2)}\n`);
  const args = ["wrangler", "deploy", "--dry-run", "--minify", "--outdir", outdir, "--config", config];
  // run from the config's directory: wrangler resolves `tsconfig` against the working directory in one
  // place and against the config's directory in another, so the two must be the same
  const output = await runCommand("npx", args, cleanup, `wrangler build of ${side}`, dir);
  const bundle = join(outdir, `${side}.js`);
  if (!existsSync(bundle)) throw new Error(`wrangler wrote no ${bundle}:\n${output.slice(-2000)}`);
  return {
    side,
    source: `bench/workers/${side}.ts`,
    bundle,
    ...uploadSize(outdir, `${side}.js`),
    wrangler: parseUploadSize(output),
    command: `npx wrangler deploy --dry-run --minify --outdir <dir> --config <generated wrangler.json>`,
  };
}

/** stdout and stderr of the command together; throws when it fails. */
async function runCommand(
  command: string,
  args: string[],
  cleanup: Cleanup,
  label: string,
  cwd?: string,
): Promise<string> {
  const child = spawn(command, args, {
    cwd,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true", NO_COLOR: "1" },
  });
  cleanup.add(label, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
  });
  let output = "";
  const keep = (chunk: Buffer) => (output = (output + chunk.toString("utf8")).slice(-20_000));
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const code = await new Promise<number | null>((done, fail) => {
    child.once("error", fail);
    child.once("exit", (c) => done(c));
  });
  if (code !== 0) throw new Error(`${label} failed (exit ${String(code)}):\n${output.trim()}`);
  return output;
}
