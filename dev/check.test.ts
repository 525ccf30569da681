/** `npm run check`: its warnings about regions without a database of their own and shared quotas kept per region. */
import { execFile, execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { startBridge } from "./bridge.js";
import { configWarnings, dotenvNames, regionsWithoutDatabase } from "./region-databases.js";
import { startRedis } from "./redis-process.js";
import { dotenvValues } from "./store-clock.js";
import { checkWranglerConfig } from "./wrangler-config.js";
import { idKeyWarnings } from "./id-key.js";
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

describe("shared quotas kept per region", () => {
  it("the repo's wrangler.toml keeps none: every global limit of its two regions has its scope", () => {
    const r = checkWranglerConfig("wrangler.toml");
    if (!r.ok) throw r.error;
    expect(Object.keys(r.config.regions).length + 1).toBeGreaterThan(1); // the check has something to look at
    const shared = r.config.routes.flatMap((route) => route.limits.filter((l) => l.key.includes("global")));
    expect(shared.map((l) => l.name)).toEqual(["site", "site", "provider"]);
    expect(r.warnings).toEqual([]);
    const run = spawnSync(process.execPath, ["--import", "tsx", "dev/check.ts"], { encoding: "utf8" });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr).not.toMatch(/scope/);
  });

  it("npm run check warns about the SMS incident, naming route, limit and what the provider sees, and exits 0", () => {
    const toml = join(dir, "sms.toml");
    const provider = (scope: string) =>
      `limits = [ { name = "provider", key = "global", rate = 400, period = "1s"${scope} } ]`;
    const config = (scope: string) =>
      [
        'name = "t"',
        "[vars]",
        'ORIGIN_URL = "https://origin.example"',
        'UPSTASH_REDIS_REST_URL_EU = "https://eu.example"',
        "[vars.SLUICE]",
        'home_region = "us"',
        "[vars.SLUICE.regions.eu]",
        'continents = ["EU"]',
        "[[vars.SLUICE.routes]]",
        'name = "sms"',
        'match = "/api/sms"',
        provider(scope),
      ].join("\n");
    writeFileSync(toml, config(""));
    const run = spawnSync(process.execPath, ["--import", "tsx", "dev/check.ts", "--config", toml], {
      encoding: "utf8",
    });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/: ok \(/);
    expect(run.stderr).toContain(
      'warning: SLUICE.routes[0].limits[0].scope: route "sms", limit "provider": key "global" runs at scope = "region" (the default)',
    );
    expect(run.stderr).toContain("400/1s per region × 2 regions = up to 800/1s at the origin");
    expect(run.stderr.split("\n").filter((l) => l.includes("warning:"))).toHaveLength(1);

    // the fixes, and the opt-out of a deliberate per-region limit, all silence it
    for (const scope of ['scope = "global"', 'scope = "split"', 'scope = "region"']) {
      writeFileSync(toml, config(`, ${scope}`));
      const r = checkWranglerConfig(toml);
      if (!r.ok) throw r.error;
      expect(r.warnings, scope).toEqual([]);
    }
  });
});

describe("routes that do nothing or never match (issue 30, point 6)", () => {
  it("npm run check warns about both, naming them, and exits 0", () => {
    const toml = join(dir, "shadow.toml");
    writeFileSync(
      toml,
      [
        'name = "t"',
        "[vars]",
        'ORIGIN_URL = "https://origin.example"',
        "[vars.SLUICE]",
        "[[vars.SLUICE.routes]]",
        'name = "api"',
        'match = "/api/*"',
        "limits = []",
        "[[vars.SLUICE.routes]]",
        'name = "products"',
        'match = "/api/products/*"',
        'methods = ["GET"]',
        'limits = [ { name = "per-ip", key = "ip", rate = 5, period = "1s" } ]',
      ].join("\n"),
    );
    const run = spawnSync(process.execPath, ["--import", "tsx", "dev/check.ts", "--config", toml], {
      encoding: "utf8",
    });
    expect(run.status, run.stderr).toBe(0);
    const warnings = run.stderr.split("\n").filter((l) => l.includes("warning:"));
    expect(warnings).toHaveLength(2);
    expect(warnings[0]).toContain('warning: SLUICE.routes[0]: route "api" limits, guards and sheds nothing');
    expect(warnings[1]).toContain(
      'warning: SLUICE.routes[1].match: route "products" can never match: every GET request it matches ("/api/products/*") is matched first by route "api"',
    );
  });

  it("npm run deploy runs the check first: an invalid configuration stops it before wrangler", () => {
    const toml = join(dir, "typo.toml");
    const outdir = join(dir, "typo-build");
    writeFileSync(
      toml,
      [
        'name = "t"',
        'main = "worker/index.ts"',
        "[vars]",
        'ORIGIN_URL = "https://origin.example"',
        "[vars.SLUICE]",
        "[[vars.SLUICE.routes]]",
        'name = "api"',
        'match = "/api/*"',
        'limits = [ { name = "per-ip", key = "ip", rate = 5, perod = "1s" } ]',
      ].join("\n"),
    );
    const run = spawnSync(
      process.execPath,
      ["--import", "tsx", "dev/deploy.ts", "--config", toml, "--dry-run", "--outdir", outdir],
      { encoding: "utf8", env: { ...process.env, WRANGLER_SEND_METRICS: "false" } },
    );
    expect(run.status).toBe(1);
    expect(run.stderr).toContain("invalid sluice configuration");
    expect(run.stderr).toContain("not deployed");
    expect(existsSync(join(outdir, "index.js"))).toBe(false);
  });

  it("npm run deploy hands its options to wrangler deploy once the check passes", () => {
    const outdir = join(dir, "ok-build");
    const run = spawnSync(
      process.execPath,
      ["--import", "tsx", "dev/deploy.ts", "--config", "wrangler.toml", "--dry-run", "--outdir", outdir],
      { encoding: "utf8", env: { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" } },
    );
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/wrangler\.toml: ok \(/);
    expect(existsSync(join(outdir, "index.js"))).toBe(true);
  });
});

describe("npm run check -- --store: each database's clock", () => {
  /** check.ts run apart (the bridge answers from this process meanwhile), with only the variables given. */
  const check = (toml: string, env: Record<string, string>) =>
    new Promise<{ status: number; stdout: string; stderr: string }>((resolve) => {
      const clean = Object.fromEntries(
        Object.entries(process.env).filter(([name]) => !name.startsWith("UPSTASH_REDIS_REST_")),
      );
      execFile(
        process.execPath,
        ["--import", "tsx", "dev/check.ts", "--config", toml, "--store"],
        { env: { ...clean, ...env }, encoding: "utf8" },
        (error, stdout, stderr) => resolve({ status: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
      );
    });
  const config = (name: string, devVars?: string) => {
    const sub = join(dir, name);
    rmSync(sub, { recursive: true, force: true });
    mkdirSync(sub, { recursive: true });
    const toml = join(sub, "wrangler.toml");
    writeFileSync(toml, ['name = "t"', "[vars]", 'ORIGIN_URL = "https://origin.example"', "[vars.SLUICE]"].join("\n"));
    if (devVars !== undefined) writeFileSync(join(sub, ".dev.vars"), devVars);
    return toml;
  };

  it("reads a .dev.vars' values, quoted or not", () => {
    expect(dotenvValues("# A=1\nUPSTASH_REDIS_REST_URL=\"http://x\"\nexport B = two words \nC='q'\n")).toEqual({
      UPSTASH_REDIS_REST_URL: "http://x",
      B: "two words",
      C: "q",
    });
  });

  it("says a Redis that accepts TIME runs on its own clock, and one that refuses it on the isolates' (a warning); exit 0", async () => {
    const redis = await startRedis();
    const normal = await startBridge({ redisUrl: redis.url, token: "t" });
    const refusing = await startBridge({ redisUrl: redis.url, token: "t", scriptTime: "refuse" });
    try {
      const ok = await check(
        config("normal", `UPSTASH_REDIS_REST_URL=${normal.url}\nUPSTASH_REDIS_REST_TOKEN=t\n`),
        {},
      );
      expect(ok.status, ok.stderr).toBe(0);
      expect(ok.stdout).toMatch(/store of "home": reachable; clock: redis/);
      expect(ok.stderr).not.toMatch(/TIME/);
      // the environment wins over .dev.vars (a deployed database's secrets, exported)
      const toml = config("refusing", `UPSTASH_REDIS_REST_URL=${normal.url}\nUPSTASH_REDIS_REST_TOKEN=t\n`);
      const refused = await check(toml, { UPSTASH_REDIS_REST_URL: refusing.url, UPSTASH_REDIS_REST_TOKEN: "t" });
      expect(refused.status, refused.stderr).toBe(0);
      expect(refused.stdout).toMatch(/store of "home": reachable; clock: isolate \(Redis refuses TIME in scripts\)/);
      expect(refused.stderr).toMatch(
        /warning: store of "home" refuses TIME in scripts \(ERR This Redis command is not allowed from script/,
      );
    } finally {
      await refusing.close();
      await normal.close();
      await redis.stop();
    }
  });

  it("a database not configured or not reachable is an error (exit 1)", async () => {
    const none = await check(config("none"), {});
    expect(none.status).toBe(1);
    expect(none.stdout).toMatch(/store of "home": no Redis configured/);
    const gone = await check(
      config("gone", "UPSTASH_REDIS_REST_URL=http://127.0.0.1:9\nUPSTASH_REDIS_REST_TOKEN=t\n"),
      {},
    );
    expect(gone.status).toBe(1);
    expect(gone.stdout).toMatch(/store of "home": not reachable/);
  });

  it("a token the database refuses, or a URL that is not REST, is misconfigured (exit 1), naming the variable and no secret", async () => {
    const redis = await startRedis();
    const bridge = await startBridge({ redisUrl: redis.url, token: "t" });
    try {
      const refused = await check(
        config("refused", `UPSTASH_REDIS_REST_URL=${bridge.url}\nUPSTASH_REDIS_REST_TOKEN=wr0ng-s3cret\n`),
        {},
      );
      expect(refused.status).toBe(1);
      expect(refused.stdout).toMatch(
        /store of "home": misconfigured: the database refused UPSTASH_REDIS_REST_TOKEN \(HTTP 401/,
      );
      const port = new URL(bridge.url).port;
      const rediss = await check(
        config(
          "rediss",
          `UPSTASH_REDIS_REST_URL=rediss://default:pa55-s3cret@127.0.0.1:${port}\nUPSTASH_REDIS_REST_TOKEN=t\n`,
        ),
        {},
      );
      expect(rediss.status).toBe(1);
      expect(rediss.stdout).toMatch(/store of "home": misconfigured: UPSTASH_REDIS_REST_URL is a Redis protocol URL/);
      for (const run of [refused, rediss]) {
        expect(run.stdout + run.stderr).not.toContain("s3cret");
      }
    } finally {
      await bridge.close();
      await redis.stop();
    }
  });
});

describe("the ids of clients", () => {
  it("warns when no secret keys them (neither SLUICE_ID_KEY nor SLUICE_ADMIN_TOKEN), and not when one does", () => {
    expect(idKeyWarnings(new Set(["ORIGIN_URL"]))).toEqual([expect.stringMatching(/pseudonyms only.*SLUICE_ID_KEY/)]);
    expect(idKeyWarnings(new Set(["SLUICE_ID_KEY"]))).toEqual([]);
    expect(idKeyWarnings(new Set(["SLUICE_ADMIN_TOKEN"]))).toEqual([]);
  });
});

describe("npm run check on the ids of clients", () => {
  it("notes that they are pseudonyms only when no secret keys them, and exits 0", () => {
    const sub = mkdtempSync(join(tmpdir(), "sluice-check-ids-"));
    try {
      const toml = join(sub, "wrangler.toml");
      writeFileSync(toml, ['name = "t"', "[vars]", 'ORIGIN_URL = "https://origin.example"'].join("\n"));
      const check = () =>
        spawnSync(process.execPath, ["--import", "tsx", "dev/check.ts", "--config", toml], { encoding: "utf8" });
      const bare = check();
      expect(bare.status, bare.stderr).toBe(0);
      expect(bare.stderr).toMatch(/note: neither SLUICE_ID_KEY nor SLUICE_ADMIN_TOKEN is set/);
      writeFileSync(join(sub, ".dev.vars"), "SLUICE_ID_KEY=k\n");
      expect(check().stderr).not.toMatch(/SLUICE_ID_KEY/);
    } finally {
      rmSync(sub, { recursive: true, force: true });
    }
  });
});
