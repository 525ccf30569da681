import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import type { TestProject } from "vitest/node";

/**
 * Builds the Worker once, with wrangler itself (so the Lua text modules are bundled exactly as
 * in a deploy), and hands the bundle's path to the tests. Each integration file then starts its
 * own redis-server, bridge and Miniflare instances from it.
 */
export default function setup(project: TestProject): void {
  const outdir = resolve(".wrangler/test-build");
  mkdirSync(outdir, { recursive: true });
  execFileSync("npx", ["wrangler", "deploy", "--dry-run", "--outdir", outdir, "--config", "wrangler.toml"], {
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" },
  });
  project.provide("workerBundle", resolve(outdir, "index.js"));
}

declare module "vitest" {
  export interface ProvidedContext {
    workerBundle: string;
  }
}
