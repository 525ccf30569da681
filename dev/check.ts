// `npm run check [-- --config file] [-- --store]`: validates the sluice configuration in a wrangler
// config, and warns (exit code 0) about what a valid one may cost, such as a region without its own
// database or a shared quota (a `global` key) kept per region, which the origin sees once per region.
// With --store it also reaches each database (dev/store-clock.ts) and says where its scripts take
// their clock from: exit code 1 when one is not configured or not reachable.
import { readFileSync } from "node:fs";
import { configWarnings, visibleVariables } from "./region-databases.js";
import { storeClocks, workerVariables } from "./store-clock.js";
import { idKeyWarnings } from "./id-key.js";
import { checkWranglerConfig, configPathFromArgs } from "./wrangler-config.js";

const argv = process.argv.slice(2);
const path = configPathFromArgs(argv);
try {
  const result = checkWranglerConfig(path);
  if (!result.ok) {
    console.error(`${path}: invalid sluice configuration: ${result.error.message}`);
    process.exit(1);
  }
  const { routes } = result.config;
  console.log(
    `${path}: ok (${routes.length} routes, ${routes.reduce((n, r) => n + r.limits.length, 0)} limits, origin ${result.config.originUrl?.href})`,
  );
  const variables = visibleVariables(path);
  for (const warning of configWarnings(result.config, variables)) console.warn(`${path}: warning: ${warning}`);
  // a note, not a warning: the secrets of a deployment are mostly where this check cannot see them
  for (const note of idKeyWarnings(variables)) console.warn(`${path}: note: ${note}`);
  for (const warning of result.warnings) console.warn(`${path}: warning: ${warning.field}: ${warning.message}`);
  if (argv.includes("--store")) {
    const probe = readFileSync(new URL("../lua/clock.lua", import.meta.url), "utf8");
    const stores = await storeClocks(result.config, workerVariables(path), probe);
    for (const line of stores.lines) console.log(`${path}: ${line}`);
    for (const warning of stores.warnings) console.warn(`${path}: warning: ${warning}`);
    if (stores.failed) process.exit(1);
  }
} catch (e) {
  console.error(`${path}: ${(e as Error).message}`);
  process.exit(1);
}
