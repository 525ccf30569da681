/**
 * Latency of two builds of the Worker side by side (`npm run bench:ab -- <before> <after>`): each
 * a directory holding a `wrangler deploy --dry-run --outdir` output under the repo (workerd reads
 * modules from below its working directory). Both run on one Redis, bridge and origin, with the
 * latency section's configurations and its interleaved blocks, so machine drift lands on both.
 *
 * @example
 * git worktree add /tmp/before <rev> && ln -s "$PWD/node_modules" /tmp/before/node_modules
 * (cd /tmp/before && npx wrangler deploy --dry-run --outdir "$OLDPWD/.wrangler/ab-before")
 * npx wrangler deploy --dry-run --outdir .wrangler/ab-after
 * npm run bench:ab -- .wrangler/ab-before .wrangler/ab-after
 */
import { join } from "node:path";
import { Miniflare } from "miniflare";
import type { SluiceInput } from "../src/config/schema.js";
import { LIMITED, PATH_FOUR, PATH_ONE, PATH_UNLIMITED, UNLIMITED } from "./config.js";
import { measureLatency, type Variant } from "./latency.js";
import { Cleanup, startStack, TOKEN } from "./stack.js";
import { IpSource } from "./stats.js";

const [before, after] = process.argv.slice(2);
if (!before || !after) throw new Error("usage: npm run bench:ab -- <before build dir> <after build dir>");
const cleanup = new Cleanup();
try {
  const stack = await startStack(cleanup, Promise.resolve(join(after, "index.js")));
  const worker = async (dir: string, sluice: SluiceInput) => {
    const mf = new Miniflare({
      modules: true,
      scriptPath: join(dir, "index.js"),
      modulesRules: [{ type: "Text", include: ["**/*.lua"] }],
      compatibilityDate: "2026-04-01",
      bindings: {
        ORIGIN_URL: stack.origin.url,
        SLUICE: sluice,
        UPSTASH_REDIS_REST_URL: stack.bridge.url,
        UPSTASH_REDIS_REST_TOKEN: TOKEN,
      },
    });
    cleanup.add(`miniflare ${dir}`, () => mf.dispose());
    await mf.ready;
    return mf;
  };
  const variants: Variant[] = [];
  for (const [path, label, sluice] of [
    [PATH_UNLIMITED, "limiting off", UNLIMITED],
    [PATH_ONE, "1 limit", LIMITED],
    [PATH_FOUR, "4 limits", LIMITED],
  ] as const) {
    for (const [dir, which] of [
      [before, "before"],
      [after, "after"],
    ] as const) {
      variants.push({
        key: `${which} ${label}`,
        label: `${which}, ${label}`,
        mf: await worker(dir, sluice),
        path,
        expect: "allow",
      });
    }
  }
  const sizes = { warmup: 200, requests: 2000, block: 250, clients: 8, concurrentRequests: 2000, rounds: 2 };
  const r = await measureLatency(variants, new IpSource(), sizes);
  console.log("sequential (ms):            median     p90     p99");
  for (const v of r.sequential.variants) {
    const { median_ms, p90_ms, p99_ms } = v.latency;
    console.log(
      `  ${v.label.padEnd(24)} ${[median_ms, p90_ms, p99_ms].map((x) => x.toFixed(3).padStart(7)).join(" ")}`,
    );
  }
  console.log(`${sizes.clients} clients (ms, req/s):      median     p99   req/s`);
  for (const v of r.concurrent.variants) {
    const { median_ms, p99_ms } = v.latency;
    console.log(
      `  ${v.label.padEnd(24)} ${[median_ms, p99_ms, v.throughput_rps].map((x) => x.toFixed(1).padStart(7)).join(" ")}`,
    );
  }
} finally {
  await cleanup.run();
}
