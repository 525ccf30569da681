import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig, type Plugin } from "vitest/config";

/** Loads lua/*.lua as text in tests, as wrangler's Text module rule does in the Worker. */
const luaText: Plugin = {
  name: "lua-text",
  load(id) {
    if (id.endsWith(".lua")) return `export default ${JSON.stringify(readFileSync(id, "utf8"))};`;
    return null;
  },
};

/**
 * Files whose assertions hold only when the Worker answers within a far Redis's round trip (latency
 * injected at the bridge, leases timed against it). On two cores, next to other workerd processes,
 * a loaded machine bends them, so `npm test` runs them in a second pass, one file at a time, after
 * the rest (`SLUICE_TESTS=timed`).
 */
const TIMED = [
  "test/integration/adaptive.test.ts",
  "test/integration/edge-store.test.ts",
  "test/integration/leases.test.ts",
];
const timedPass = process.env.SLUICE_TESTS === "timed";

export default defineConfig({
  plugins: [luaText],
  // the dev workspace's entry, as tsconfig.json's `paths` maps it (also where node_modules lacks the link)
  resolve: { alias: { "@sluice/dev": fileURLToPath(new URL("./dev/index.ts", import.meta.url)) } },
  test: {
    include: timedPass ? TIMED : ["test/**/*.test.ts", "src/**/*.test.ts", "dev/**/*.test.ts", "bench/**/*.test.ts"],
    exclude: timedPass ? [] : [...TIMED, "**/node_modules/**"],
    environment: "node",
    globalSetup: ["test/global-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Integration files each spawn their own Redis and workerd processes: two cores, two forks.
    pool: "forks",
    poolOptions: { forks: { maxForks: timedPass ? 1 : 2, minForks: 1 } },
  },
});
