/**
 * `npm run check -- --store`: reaches each database of the deployment as the Worker would and says
 * where its scripts take their clock from (src/store/clock.ts): Redis's TIME, or, where the
 * database refuses TIME in scripts (ElastiCache Serverless), the isolates' clocks. Opt-in, as it
 * is the one part of the check that calls a live database: one PING and one run of lua/clock.lua
 * per distinct database. The credentials are the Worker's variables, looked up in the environment,
 * then the `.dev.vars` beside the config, then its `[vars]` (secrets set with `wrangler secret
 * put` are not visible from here: export them to check a deployed database).
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { parse } from "smol-toml";
import type { Config } from "../src/config/index.js";
import type { Env } from "../src/env.js";
import { allRegions, envConnections, Stores } from "../src/region/index.js";
import { storeClock } from "../src/store/clock-probe.js";
import { versionKey } from "../src/store/layout.js";
import { isMisconfigured } from "../src/store/deadline.js";
import { StoreRegistry, type Store } from "../src/store/redis.js";
import { redact } from "../src/util/log.js";

/** What the probe found: lines to print, and whether any database could not be checked. */
export interface StoreClockResult {
  lines: string[];
  warnings: string[];
  failed: boolean;
}

/** The Worker's variables as `wrangler dev` would give them, the environment first. */
export function workerVariables(configPath: string, environment: NodeJS.ProcessEnv = process.env): Env {
  const toml = parse(readFileSync(configPath, "utf8")) as { vars?: Record<string, unknown> };
  const vars: Record<string, string> = {};
  for (const [name, value] of Object.entries(toml.vars ?? {})) if (typeof value === "string") vars[name] = value;
  const devVars = join(dirname(configPath), ".dev.vars");
  if (existsSync(devVars)) Object.assign(vars, dotenvValues(readFileSync(devVars, "utf8")));
  for (const [name, value] of Object.entries(environment)) if (value !== undefined) vars[name] = value;
  return vars as Env;
}

/** `NAME=value` lines (`export` allowed, values optionally in quotes); comments and blank lines skipped. */
export function dotenvValues(text: string): Record<string, string> {
  const values: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$/.exec(line);
    if (!m) continue;
    const raw = m[2] as string;
    const quoted = /^(["'])(.*)\1$/.exec(raw);
    values[m[1] as string] = quoted ? (quoted[2] as string) : raw;
  }
  return values;
}

/** Each distinct database of the deployment, with the regions it serves. */
function databases(config: Config, env: Env): { regions: string[]; store: Store | undefined }[] {
  const stores = new Stores(new StoreRegistry(), envConnections(env, config.home_region), config);
  const byId = new Map<string, { regions: string[]; store: Store | undefined }>();
  for (const region of allRegions(config)) {
    const store = stores.offPath(region);
    const id = store?.id ?? `none:${region}`;
    const seen = byId.get(id) ?? { regions: [], store };
    seen.regions.push(region);
    byId.set(id, seen);
  }
  return [...byId.values()];
}

/**
 * Probes every database: a line per database saying its clock, a warning for one that refuses
 * TIME in scripts, `failed` when one is not configured, misconfigured (its token refused, its URL
 * not REST: the line names the variable) or not reachable.
 */
export async function storeClocks(config: Config, env: Env, probeSource: string): Promise<StoreClockResult> {
  const result: StoreClockResult = { lines: [], warnings: [], failed: false };
  for (const { regions, store } of databases(config, env)) {
    const name = `store of ${regions.map((r) => `"${r}"`).join(", ")}`;
    if (!store) {
      result.failed = true;
      result.lines.push(`${name}: no Redis configured (UPSTASH_REDIS_REST_URL / _TOKEN, or the region's own)`);
      continue;
    }
    try {
      await store.ping();
      const clock = await storeClock(store, probeSource, versionKey(config.key_prefix));
      if (clock.mode === "isolate") {
        result.lines.push(`${name}: reachable; clock: isolate (Redis refuses TIME in scripts)`);
        result.warnings.push(
          `${name} refuses TIME in scripts (${clock.refusal}): decisions run on the isolates' clocks, held monotone per key; see docs/deploy.md, "A Redis that refuses TIME in scripts"`,
        );
      } else result.lines.push(`${name}: reachable; clock: ${clock.mode} (Redis's TIME in scripts)`);
    } catch (e) {
      result.failed = true;
      // a token refused or a URL that is not REST: the deployment's mistake, said as such (no secret in it)
      if (isMisconfigured(e)) result.lines.push(`${name}: misconfigured: ${e.message}`);
      else result.lines.push(`${name}: not reachable: ${redact((e as Error).message)}`);
    }
  }
  return result;
}
