import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // caps for a hang, not budgets: beforeAll bundles the Worker with wrangler and starts workerd,
    // and a loaded machine may take several times as long as an idle one
    hookTimeout: 120_000,
    testTimeout: 120_000,
  },
});
