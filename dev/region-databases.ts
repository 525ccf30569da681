/**
 * What `npm run check` can tell about the databases behind the regions: a region without its own
 * `UPSTASH_REDIS_REST_URL_<REGION>` decides against the home region's database, far away.
 * Secrets set with `wrangler secret put` are not visible from here; the check reads what wrangler
 * dev would give the Worker: the config's `[vars]` and the `.dev.vars` file next to it.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { parse } from "smol-toml";
import type { Config } from "../src/config/index.js";
import { allRegions, regionSecretNames } from "../src/region/index.js";

/** The variable names of the config's `[vars]` and of the `.dev.vars` beside it. */
export function visibleVariables(configPath: string): Set<string> {
  const toml = parse(readFileSync(configPath, "utf8")) as { vars?: Record<string, unknown> };
  const names = new Set(Object.keys(toml.vars ?? {}));
  const devVars = join(dirname(configPath), ".dev.vars");
  if (existsSync(devVars)) for (const name of dotenvNames(readFileSync(devVars, "utf8"))) names.add(name);
  return names;
}

/** The names a dotenv file sets (`NAME=value`, `export NAME=value`; comments and blank lines skipped). */
export function dotenvNames(text: string): string[] {
  return text.split(/\r?\n/).flatMap((line) => {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=/.exec(line);
    return m ? [m[1] as string] : [];
  });
}

/** The regions, home excepted, with no `UPSTASH_REDIS_REST_URL_<REGION>` among `variables`. */
export function regionsWithoutDatabase(
  config: Pick<Config, "regions" | "home_region">,
  variables: ReadonlySet<string>,
): string[] {
  return allRegions(config).filter(
    (region) => region !== config.home_region && !variables.has(regionSecretNames(region).url),
  );
}

/** The warnings `npm run check` prints for a valid configuration; none is an error. */
export function configWarnings(config: Config, variables: ReadonlySet<string>): string[] {
  const warnings = regionsWithoutDatabase(config, variables).map(
    (region) =>
      `region "${region}" has no database of its own (no ${regionSecretNames(region).url} in [vars] or .dev.vars): ` +
      `its decisions travel to the home region's ("${config.home_region}") database, a round trip across the ocean for a far region ` +
      `(~80 ms Frankfurt → Virginia) that the decision budget (timeout_ms..max_timeout_ms) must cover, ` +
      `and its regional buckets share that database (kept apart by key, not by place). ` +
      `If you set it with \`wrangler secret put\`, this check cannot see it: ignore this.`,
  );
  if (config.global_timeout_ms !== undefined) {
    warnings.push(
      "global_timeout_ms is deprecated and ignored: every store's budget adapts to its round trip, between timeout_ms and max_timeout_ms",
    );
  }
  return warnings;
}
