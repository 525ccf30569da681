import { readFileSync } from "node:fs";
import { parse } from "smol-toml";
import { loadConfig, type ConfigResult } from "../src/config/index.js";

/**
 * Reads a wrangler.toml and validates its sluice configuration exactly as the Worker will
 * (`vars.ORIGIN_URL`, `vars.SLUICE`), so `npm run check` and the dev start report the same
 * error a request would get.
 */
export function checkWranglerConfig(path: string, overrides: { ORIGIN_URL?: string } = {}): ConfigResult {
  const toml = parse(readFileSync(path, "utf8")) as {
    vars?: { ORIGIN_URL?: unknown; SLUICE?: unknown };
    queues?: { producers?: Array<{ binding?: string }> };
  };
  const hasQueue = (toml.queues?.producers ?? []).some((p) => p.binding === "SLUICE_QUEUE");
  return loadConfig({ ORIGIN_URL: overrides.ORIGIN_URL ?? toml.vars?.ORIGIN_URL, SLUICE: toml.vars?.SLUICE, hasQueue });
}

/** `--config <file>` (or `-c <file>`, `--config=<file>`, as wrangler reads them) from argv, else wrangler.toml. */
export function configPathFromArgs(argv: readonly string[]): string {
  const joined = argv.find((a) => a.startsWith("--config="));
  if (joined) return joined.slice("--config=".length);
  const i = argv.findIndex((a) => a === "--config" || a === "-c");
  return i >= 0 && argv[i + 1] ? (argv[i + 1] as string) : "wrangler.toml";
}
