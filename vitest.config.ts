import { readFileSync } from "node:fs";
import { defineConfig, type Plugin } from "vitest/config";

/** Loads lua/*.lua as text in tests, as wrangler's Text module rule does in the Worker. */
const luaText: Plugin = {
  name: "lua-text",
  load(id) {
    if (id.endsWith(".lua")) return `export default ${JSON.stringify(readFileSync(id, "utf8"))};`;
    return null;
  },
};

export default defineConfig({
  plugins: [luaText],
  test: {
    include: ["test/**/*.test.ts", "src/**/*.test.ts"],
    environment: "node",
    globalSetup: ["test/global-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Integration files each spawn their own Redis and workerd processes: two cores, two forks.
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
  },
});
