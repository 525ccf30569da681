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
 * `SLUICE_TEST_LOGS=1` prints what the tests and the Workers log (figures some tests print, the
 * Worker's own log lines) for every test, with the default reporter's list of files and slow tests.
 * Without it the output is short: a dot per test and the summary; a failing test still prints its
 * diff, its stack and everything it logged (`silent: "passed-only"`).
 */
const logs = Boolean(process.env.SLUICE_TEST_LOGS);

export default defineConfig({
  plugins: [luaText],
  // the dev workspace's entry, as tsconfig.json's `paths` maps it (also where node_modules lacks the link)
  resolve: { alias: { "@sluice/dev": fileURLToPath(new URL("./dev/index.ts", import.meta.url)) } },
  test: {
    include: ["test/**/*.test.ts", "src/**/*.test.ts", "dev/**/*.test.ts", "bench/**/*.test.ts"],
    reporters: logs ? ["default"] : ["dot"],
    silent: logs ? false : "passed-only",
    environment: "node",
    globalSetup: ["test/global-setup.ts"],
    // Caps for a test or hook that hangs, not budgets: a loaded machine may take several times as
    // long as an idle one (the property tests against Redis, a Worker's start), and must not fail for it.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Integration files each spawn their own Redis and workerd processes: two cores, two forks.
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
  },
});
