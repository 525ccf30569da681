import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const SYSTEM_CHROMIUM = "/usr/bin/chromium";

/**
 * The Chromium the browser tests drive, chosen in this order:
 *
 * 1. `CHROMIUM_PATH`, when set: an explicit choice wins, and a wrong path is an error rather than a
 *    silent fall-through to another browser;
 * 2. `/usr/bin/chromium` (Debian's `chromium`), when it exists: a machine that already has one starts
 *    it directly, without unpacking anything;
 * 3. the headless Chromium of the `@sparticuz/chromium` devDependency, so that `npm install` is all a
 *    machine needs. It is imported only here, so the first two cases never pay for it. Its npm
 *    package carries a Linux x86-64 build only: elsewhere (macOS, arm64) set `CHROMIUM_PATH`.
 *
 * `executablePath()` unpacks into the temp directory (about 200 MB, once; later calls reuse it) and
 * returns any `chromium` already there, whichever version or project left it. So it runs with the
 * temp directory pointed at a folder of this checkout named after the pinned version,
 * `node_modules/.cache/sluice-chromium-<version>/`: the test drives the Chromium that
 * package-lock.json names, not a leftover, and the system's temp directory is left as it was
 * (`npm ci`, which empties node_modules, takes the unpacked browser with it).
 */
export async function chromiumExecutable(): Promise<string> {
  const fromEnv = process.env.CHROMIUM_PATH;
  if (fromEnv) {
    if (!existsSync(fromEnv)) throw new Error(`CHROMIUM_PATH is ${fromEnv}, which does not exist`);
    return fromEnv;
  }
  if (existsSync(SYSTEM_CHROMIUM)) return SYSTEM_CHROMIUM;
  if (process.platform !== "linux" || process.arch !== "x64") {
    throw new Error(
      `no Chromium at ${SYSTEM_CHROMIUM}, and @sparticuz/chromium has a Linux x86-64 build only (this is ${process.platform}-${process.arch}): set CHROMIUM_PATH`,
    );
  }
  const entry = createRequire(import.meta.url).resolve("@sparticuz/chromium"); // <pkg>/build/cjs/index.cjs
  const { version } = JSON.parse(readFileSync(join(dirname(entry), "..", "..", "package.json"), "utf8")) as {
    version: string;
  };
  const into = fileURLToPath(new URL(`../../node_modules/.cache/sluice-chromium-${version}`, import.meta.url));
  mkdirSync(into, { recursive: true });
  const { default: packaged } = await import("@sparticuz/chromium");
  // os.tmpdir() reads TMPDIR on each call, and executablePath() computes every output path before
  // its first await: setting TMPDIR around the call, synchronously, is enough.
  const before = process.env.TMPDIR;
  process.env.TMPDIR = into;
  let unpacking: Promise<string>;
  try {
    unpacking = packaged.executablePath();
  } finally {
    if (before === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = before;
  }
  return unpacking;
}
