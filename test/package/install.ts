/**
 * Installs a copy of an example app, with sluice from the packed tarball, without asking the
 * registry anything: `npm install` would need every package's metadata (the packuments), which
 * the `npm ci` that installed this repo never fetched, so it would fail offline. A package-lock
 * does not need them: it names each package's version and integrity, and npm takes the tarball of
 * that integrity from its cache, where this repo's own `npm ci` left it. So the copy gets a lock
 * written here, from this repo's: the same versions of the same packages (hono, zod and what they
 * depend on), plus an entry for the sluice tarball, and `npm ci` installs it.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

/** The fields of a package-lock v3 entry that this file reads or writes. */
interface LockEntry {
  name?: string;
  version?: string;
  resolved?: string;
  integrity?: string;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  dev?: boolean;
  devOptional?: boolean;
  optional?: boolean;
  peer?: boolean;
}

interface Lockfile {
  name: string;
  version: string;
  lockfileVersion: number;
  requires: boolean;
  packages: Record<string, LockEntry>;
}

interface PackageJson {
  name: string;
  version: string;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

const readJson = <T>(path: string): T => JSON.parse(readFileSync(path, "utf8")) as T;

/** "node_modules/a/node_modules/b" -> "node_modules/a"; a top-level package -> "" (the root). */
function parentOf(path: string): string {
  const at = path.lastIndexOf("/node_modules/");
  return at === -1 ? "" : path.slice(0, at);
}

/** Where Node would find `name` from the package at `from`: its own node_modules, then each parent's. */
function resolveIn(packages: Record<string, LockEntry>, from: string, name: string): string | undefined {
  for (let dir = from; ; dir = parentOf(dir)) {
    const path = `${dir === "" ? "" : `${dir}/`}node_modules/${name}`;
    if (packages[path]) return path;
    if (dir === "") return undefined;
  }
}

/** A dependency edge: where it starts, what it names, whether the package works without it. */
type Edge = { from: string; name: string; optional: boolean };

function edgesOf(path: string, entry: LockEntry): Edge[] {
  const edges: Edge[] = [];
  for (const name of Object.keys(entry.dependencies ?? {})) edges.push({ from: path, name, optional: false });
  for (const name of Object.keys(entry.optionalDependencies ?? {})) edges.push({ from: path, name, optional: true });
  for (const name of Object.keys(entry.peerDependencies ?? {})) {
    edges.push({ from: path, name, optional: entry.peerDependenciesMeta?.[name]?.optional === true });
  }
  return edges;
}

/**
 * The lock entries `roots` need, taken from `source` with their paths (so the layout stays one
 * that `source` proved valid), and which of them are needed only through optional edges.
 */
function closure(source: Record<string, LockEntry>, roots: Edge[]): { paths: Set<string>; required: Set<string> } {
  const walk = (withOptional: boolean): Set<string> => {
    const seen = new Set<string>();
    const queue = roots.filter((e) => withOptional || !e.optional);
    for (let edge = queue.shift(); edge; edge = queue.shift()) {
      const path = resolveIn(source, edge.from, edge.name);
      if (!path) {
        if (edge.optional) continue;
        throw new Error(
          `${edge.name} (needed by ${edge.from || "the example"}) is not in this repo's package-lock.json`,
        );
      }
      if (seen.has(path)) continue;
      seen.add(path);
      const entry = source[path] as LockEntry;
      queue.push(...edgesOf(path, entry).filter((e) => withOptional || !e.optional));
    }
    return seen;
  };
  return { paths: walk(true), required: walk(false) };
}

/**
 * Installs `appDir` (a copy of an example) with sluice from `tarball`, from the npm cache.
 * The copy's devDependencies are dropped: its tools (wrangler, vitest, typescript) are this
 * repo's, which Node finds up the directory tree as long as the copy lives inside the repo.
 */
export function installExample(opts: { repoRoot: string; appDir: string; tarball: string }): void {
  const { repoRoot, appDir, tarball } = opts;
  const app = readJson<PackageJson>(join(appDir, "package.json"));
  const sluice = readJson<PackageJson>(join(repoRoot, "package.json"));
  const repoLock = readJson<Lockfile>(join(repoRoot, "package-lock.json"));

  const spec = app.dependencies?.sluice ?? "";
  if (!spec.startsWith("file:") || resolve(appDir, spec.slice("file:".length)) !== resolve(tarball)) {
    throw new Error(`the example's "sluice" dependency (${spec}) does not name the packed tarball ${tarball}`);
  }
  delete app.devDependencies;
  writeFileSync(join(appDir, "package.json"), `${JSON.stringify(app, null, 2)}\n`);

  // sluice sits at node_modules/sluice; its own dependencies resolve from there up, as any package's
  const source: Record<string, LockEntry> = { ...repoLock.packages };
  const sluicePath = "node_modules/sluice";
  source[sluicePath] = {
    version: sluice.version,
    resolved: spec,
    integrity: `sha512-${createHash("sha512").update(readFileSync(tarball)).digest("base64")}`,
    dependencies: sluice.dependencies,
    peerDependencies: sluice.peerDependencies,
    peerDependenciesMeta: sluice.peerDependenciesMeta,
  };
  const roots = Object.keys(app.dependencies ?? {}).map((name) => ({ from: "", name, optional: false }));
  const { paths, required } = closure(source, roots);
  // said here plainly, rather than as npm ci's "package.json and package-lock.json are not in sync"
  for (const [name, wanted] of Object.entries(app.dependencies ?? {})) {
    const has = source[`node_modules/${name}`]?.version;
    if (/^\d/.test(wanted) && has !== wanted) {
      throw new Error(`the example pins ${name} ${wanted}, this repo has ${has ?? "none"}: keep the two in step`);
    }
  }

  const packages: Record<string, LockEntry> = {
    "": { name: app.name, version: app.version, dependencies: app.dependencies },
  };
  for (const path of [...paths].sort()) {
    // the repo's flags say how the repo needs a package (hono is a devDependency there): recomputed for the app
    const {
      dev: _dev,
      devOptional: _devOptional,
      optional: _optional,
      peer: _peer,
      ...entry
    } = source[path] as LockEntry;
    packages[path] = required.has(path) ? entry : { ...entry, optional: true };
  }
  const lock: Lockfile = { name: app.name, version: app.version, lockfileVersion: 3, requires: true, packages };
  writeFileSync(join(appDir, "package-lock.json"), `${JSON.stringify(lock, null, 2)}\n`);

  // --prefer-offline: from the cache without revalidating; a tarball missing there is fetched
  execFileSync("npm", ["ci", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts"], {
    cwd: appDir,
    stdio: ["ignore", "ignore", "pipe"],
  });
}
