/**
 * `npx tsx bench/weight.ts`: what a Worker carries for sluice. The npm package is built
 * (`npm run build`), a Hono Worker importing `rateLimit` alone (bench/workers/weight-rate-limit.ts,
 * written against the package: from `sluice/rate-limit`, and from the root `sluice`) is bundled by
 * `wrangler deploy --dry-run --minify`, and each bundle is reported as wrangler reports it
 * (gzip KiB) with the median time a fresh Node process takes to import it (parse and evaluate it
 * once: a cold start's share; interleaved rounds, so load on the machine hits both alike).
 *
 * Work happens under .wrangler/weight/ (ignored by git); nothing is written elsewhere.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

const root = resolve(import.meta.dirname, "..");
const work = join(root, ".wrangler", "weight");
const ROUNDS = 15;

export interface WorkerWeight {
  /** How the Worker imports rateLimit. */
  from: string;
  /** wrangler's "Total Upload ... / gzip: N KiB". */
  gzipKiB: number;
  /** Median milliseconds to import the bundle once in a fresh process. */
  evalMs: number;
}

/** A directory where `sluice` resolves to this repository's package.json (its `exports`, its dist/). */
function appDir(): string {
  rmSync(work, { recursive: true, force: true });
  mkdirSync(join(work, "node_modules"), { recursive: true });
  symlinkSync(root, join(work, "node_modules", "sluice"), "dir");
  return work;
}

/** Bundles the Worker with `rateLimit` imported from `from` as wrangler would deploy it: the path of the bundle and its gzip size. */
function bundle(dir: string, from: string, name: string): { file: string; gzipKiB: number } {
  const source = readFileSync(join(root, "bench", "workers", "weight-rate-limit.ts"), "utf8");
  writeFileSync(join(dir, `${name}.ts`), source.replace(/from "[^"]*rate-limit\.js"/, `from "${from}"`));
  const config = join(dir, `${name}.toml`);
  writeFileSync(config, `name = "${name}"\nmain = "${name}.ts"\ncompatibility_date = "2025-06-01"\n`);
  const wrangler = join(root, "node_modules", "wrangler", "bin", "wrangler.js");
  const out = join(dir, `out-${name}`);
  const report = execFileSync(
    process.execPath,
    [wrangler, "deploy", "--dry-run", "--minify", "--outdir", out, "--config", config],
    { cwd: dir, env: { ...process.env, WRANGLER_SEND_METRICS: "false" }, encoding: "utf8" },
  );
  const gzip = /gzip: ([\d.]+) KiB/.exec(report);
  if (!gzip) throw new Error(`wrangler reported no gzip size:\n${report}`);
  return { file: join(out, `${name}.js`), gzipKiB: Number(gzip[1]) };
}

/** Median import time of each bundle, ROUNDS fresh processes each, interleaved. */
function evalTimes(files: string[]): number[] {
  const times = files.map((): number[] => []);
  for (let round = 0; round < ROUNDS; round++) {
    files.forEach((file, i) => {
      const code = `const t = performance.now(); await import(${JSON.stringify(`file://${file}`)}); console.log(performance.now() - t);`;
      times[i]?.push(Number(execFileSync(process.execPath, ["--input-type=module", "-e", code], { encoding: "utf8" })));
    });
  }
  return times.map((t) => t.sort((a, b) => a - b)[ROUNDS >> 1] ?? NaN);
}

export function measureWeight(): WorkerWeight[] {
  execFileSync("npm", ["run", "build"], { cwd: root, stdio: "ignore" });
  const dir = appDir();
  const imports = ["sluice/rate-limit", "sluice"];
  const bundles = imports.map((from, i) => bundle(dir, from, `weight-${i}`));
  const evalMs = evalTimes(bundles.map((b) => b.file));
  return imports.map((from, i) => ({ from, gzipKiB: bundles[i]?.gzipKiB ?? NaN, evalMs: evalMs[i] ?? NaN }));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const w of measureWeight())
    console.log(`rateLimit from "${w.from}": ${w.gzipKiB} KiB gzip, evaluated in ${w.evalMs.toFixed(1)} ms (median)`);
}
