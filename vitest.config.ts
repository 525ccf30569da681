import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { configDefaults, defineConfig, type Plugin } from "vitest/config";
import { SlowFirst } from "./test/sequencer.js";

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
    reporters: logs ? ["default"] : ["dot"],
    silent: logs ? false : "passed-only",
    environment: "node",
    // Caps for a test or hook that hangs, not budgets: a loaded machine may take several times as
    // long as an idle one (the property tests against Redis, a Worker's start), and must not fail for it.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Files known to be slow start first (test/sequencer.ts), so that no long file is left to run
    // alone at the end of a run on a clean clone, where vitest has no timings of its own yet.
    sequence: { sequencer: SlowFirst },
    // Each pool's size (the pools take these from the root config, not from a project's).
    poolOptions: {
      // Integration files each spawn their own Redis and workerd processes: two cores, two forks.
      // A fork runs one file after another (each file starts and stops its own processes in its
      // hooks), importing miniflare and the rest once rather than once per file.
      forks: { maxForks: 2, minForks: 1, isolate: false },
      // The unit files share two threads and their imported modules (zod, hono, ...): collecting
      // them again in a fresh process per file cost more than their tests took.
      threads: { maxThreads: 2, minThreads: 1, isolate: false },
    },
    projects: [
      {
        extends: true,
        test: {
          name: "unit",
          include: ["src/**/*.test.ts", "dev/**/*.test.ts", "bench/**/*.test.ts", "test/unit/**/*.test.ts"],
          pool: "threads",
          isolate: false,
          // Before the stack's files: the two projects' pools never run at once, so two cores
          // still run two files at a time.
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: "stack",
          include: ["test/**/*.test.ts"],
          exclude: [...configDefaults.exclude, "test/unit/**"],
          globalSetup: ["test/global-setup.ts"],
          pool: "forks",
          isolate: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
