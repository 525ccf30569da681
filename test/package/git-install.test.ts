/**
 * The install the docs give while sluice is not on the npm registry, `npm install
 * github:sluice-dev/sluice`, as npm carries it out: clone the repository, install its
 * development tools there, run its `prepare` script (npm runs no `prepack` for a git dependency,
 * so a package built only by `prepack` would install without dist/), and pack what `files` says.
 * `npm pack <git url>` is that very path without a consumer around it: here from this
 * repository's committed HEAD by a `git+file:` URL, offline (the npm cache that this repo's own
 * `npm ci` filled has every package its lock names). Uncommitted changes are not in it.
 */
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));

/** Runs a command to its end; rejects with all it printed when it fails. */
function run(command: string, args: string[], cwd: string): Promise<string> {
  return new Promise((done, fail) => {
    const child = spawn(command, args, { cwd, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let output = "";
    child.stdout.on("data", (c: Buffer) => ((stdout += c.toString()), (output += c.toString())));
    child.stderr.on("data", (c: Buffer) => (output += c.toString()));
    child.on("error", fail);
    child.on("close", (code) =>
      code === 0 ? done(stdout) : fail(new Error(`${command} ${args.join(" ")}: exit ${code}\n${output}`)),
    );
  });
}

describe("installing from the git repository", () => {
  const parent = join(root, ".wrangler", "git-install-test");
  mkdirSync(parent, { recursive: true });
  const work = mkdtempSync(join(parent, "run-"));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it("builds the package as it installs: dist/ with every file package.json names", async () => {
    const head = (await run("git", ["rev-parse", "HEAD"], root)).trim();
    const packed = await run(
      "npm",
      [
        "pack",
        `git+file://${root.replace(/\/$/, "")}#${head}`,
        "--offline",
        "--json",
        // the scripts' output (the build's summary) kept off stdout, where the JSON goes
        "--foreground-scripts=false",
        "--pack-destination",
        work,
      ],
      work,
    );
    const [report] = JSON.parse(packed) as [{ filename: string; files: Array<{ path: string }> }];
    const files = report.files.map((f) => f.path);
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
      main: string;
      types: string;
      exports: Record<string, Record<string, string>>;
    };
    const named = [pkg.main, pkg.types, ...Object.values(pkg.exports).flatMap((c) => Object.values(c))];
    expect(named.map((f) => f.replace(/^\.\//, "")).filter((f) => !files.includes(f))).toEqual([]);
    for (const file of ["README.md", "LICENSE", "CHANGELOG.md", "package.json"]) expect(files).toContain(file);
    // and what a git install must not carry: the repo's own sources and tools
    expect(files.filter((f) => /^(src|test|dev|bench|docs|lua|scripts|node_modules)\//.test(f))).toEqual([]);
  }, 600_000);
});
