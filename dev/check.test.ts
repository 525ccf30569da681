/** `npm run check`: its warnings about regions without a database of their own. */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { configWarnings, dotenvNames, regionsWithoutDatabase } from "./region-databases.js";
import { loadConfig, type Config } from "../src/config/index.js";

const dir = mkdtempSync(join(tmpdir(), "sluice-check-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function configOf(sluice: unknown): Config {
  const r = loadConfig({ ORIGIN_URL: "https://origin.example", SLUICE: sluice });
  if (!r.ok) throw r.error;
  return r.config;
}

const REGIONS = {
  home_region: "us",
  regions: { us: { continents: ["NA"] }, eu: { continents: ["EU"] }, "ap-south": { continents: ["AS"] } },
};

describe("regions without a database of their own", () => {
  it("reads the names a .dev.vars sets, comments and blank lines aside", () => {
    expect(dotenvNames('# A=1\nUPSTASH_REDIS_REST_URL_EU="https://eu"\n\n  export B = 2\n=x\nnot a line\n')).toEqual([
      "UPSTASH_REDIS_REST_URL_EU",
      "B",
    ]);
  });

  it("names every region but home that has no UPSTASH_REDIS_REST_URL_<REGION>, upper-cased as the Worker reads it", () => {
    const config = configOf(REGIONS);
    expect(regionsWithoutDatabase(config, new Set(["UPSTASH_REDIS_REST_URL"]))).toEqual(["ap-south", "eu"]);
    expect(
      regionsWithoutDatabase(config, new Set(["UPSTASH_REDIS_REST_URL_EU", "UPSTASH_REDIS_REST_URL_AP_SOUTH"])),
    ).toEqual([]);
    expect(regionsWithoutDatabase(configOf({}), new Set())).toEqual([]); // one region, the home one
  });

  it("says what it costs, and that global_timeout_ms is deprecated", () => {
    const [eu] = configWarnings(configOf({ ...REGIONS, regions: { eu: REGIONS.regions.eu } }), new Set());
    expect(eu).toMatch(/region "eu" has no database of its own/);
    expect(eu).toMatch(/home region's \("us"\) database/);
    expect(eu).toMatch(/~80 ms Frankfurt → Virginia/);
    expect(eu).toMatch(/regional buckets share that database/);
    expect(configWarnings(configOf({ global_timeout_ms: 300 }), new Set())).toEqual([
      expect.stringMatching(/global_timeout_ms is deprecated and ignored/),
    ]);
    expect(configWarnings(configOf({}), new Set())).toEqual([]);
  });

  it("npm run check warns from [vars] and .dev.vars, and still exits 0", () => {
    const toml = join(dir, "wrangler.toml");
    writeFileSync(
      toml,
      [
        'name = "t"',
        "[vars]",
        'ORIGIN_URL = "https://origin.example"',
        'UPSTASH_REDIS_REST_URL_AP_SOUTH = "https://ap.example"',
        "[vars.SLUICE]",
        'home_region = "us"',
        "[vars.SLUICE.regions.eu]",
        'continents = ["EU"]',
        "[vars.SLUICE.regions.ap-south]",
        'continents = ["AS"]',
        "[vars.SLUICE.regions.sa]",
        'continents = ["SA"]',
      ].join("\n"),
    );
    writeFileSync(
      join(dir, ".dev.vars"),
      'UPSTASH_REDIS_REST_URL_SA="https://sa.example"\nUPSTASH_REDIS_REST_TOKEN_SA="t"\n',
    );
    const run = spawnSync(process.execPath, ["--import", "tsx", "dev/check.ts", "--config", toml], {
      encoding: "utf8",
    });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/: ok \(/);
    expect(run.stderr).toMatch(/warning: region "eu" has no database of its own/);
    expect(run.stderr).not.toMatch(/region "ap-south"|region "sa"/);
  });

  it("an invalid max_timeout_ms is still an error (exit 1), naming the field", () => {
    const toml = join(dir, "bad.toml");
    writeFileSync(
      toml,
      [
        'name = "t"',
        "[vars]",
        'ORIGIN_URL = "https://origin.example"',
        "[vars.SLUICE]",
        "timeout_ms = 200",
        "max_timeout_ms = 100",
      ].join("\n"),
    );
    expect(() =>
      execFileSync(process.execPath, ["--import", "tsx", "dev/check.ts", "--config", toml], { stdio: "pipe" }),
    ).toThrow(/SLUICE\.max_timeout_ms: must be at least timeout_ms \(200\)/);
  });
});
