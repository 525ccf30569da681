import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // beforeAll bundles the Worker with wrangler and starts workerd
    hookTimeout: 60_000,
    testTimeout: 15_000,
  },
});
