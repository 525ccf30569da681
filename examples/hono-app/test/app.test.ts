/**
 * The example Worker as it deploys: bundled by wrangler (so with sluice from node_modules, as
 * installed from the tarball), run in workerd by Miniflare, against the Redis named by
 * UPSTASH_REDIS_REST_URL / UPSTASH_REDIS_REST_TOKEN (an Upstash database, or sluice's local
 * bridge; see README.md). Without those two the tests are skipped.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const url = process.env.UPSTASH_REDIS_REST_URL;
const token = process.env.UPSTASH_REDIS_REST_TOKEN;
const appDir = fileURLToPath(new URL("..", import.meta.url));

/** A client address of its own per run: a Redis that outlives the run (Upstash) still has last run's buckets. */
const hex = () => Math.floor(Math.random() * 0x10000).toString(16);
const clientIp = `2001:db8:${hex()}:${hex()}::1`;

describe.skipIf(!url || !token)("the example Worker, with sluice as installed from its tarball", () => {
  let mf: Miniflare | undefined;
  let outdir: string | undefined;

  const call = async (
    path: string,
    init: { method?: string; ip?: string; headers?: Record<string, string>; body?: string } = {},
  ) => {
    if (!mf) throw new Error("the Worker did not start");
    const res = await mf.dispatchFetch(`http://example.test${path}`, {
      method: init.method ?? "GET",
      headers: { "CF-Connecting-IP": init.ip ?? clientIp, ...init.headers },
      body: init.body,
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, json: () => JSON.parse(text) as Record<string, unknown>, text };
  };

  beforeAll(async () => {
    outdir = mkdtempSync(join(tmpdir(), "sluice-example-"));
    // wrangler's own bundle, with no rule for .lua files: it only works if sluice inlined its scripts
    const wrangler = createRequire(import.meta.url).resolve("wrangler/bin/wrangler.js");
    execFileSync(process.execPath, [wrangler, "deploy", "--dry-run", "--outdir", outdir], {
      cwd: appDir,
      stdio: ["ignore", "ignore", "inherit"],
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" },
    });
    const compatibilityDate = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(
      readFileSync(join(appDir, "wrangler.toml"), "utf8"),
    )?.[1];
    mf = new Miniflare({
      modules: true,
      scriptPath: join(outdir, "index.js"),
      // module names are paths relative to this; the default (the working directory) is not above outdir
      modulesRoot: outdir,
      compatibilityDate,
      bindings: { UPSTASH_REDIS_REST_URL: url ?? "", UPSTASH_REDIS_REST_TOKEN: token ?? "" },
    });
    await mf.ready;
  }, 60_000);

  afterAll(async () => {
    await mf?.dispose();
    if (outdir) rmSync(outdir, { recursive: true, force: true });
  });

  it("GET /api/items: five answers a minute per IP, then a 429 with Retry-After and RateLimit", async () => {
    for (let i = 0; i < 5; i++) {
      const res = await call("/api/items");
      expect(res.status, res.text).toBe(200);
      // the handler read the decision from c.get("sluice")
      expect(res.json().remaining).toEqual(expect.any(Number));
    }
    const refused = await call("/api/items");
    expect(refused.status, refused.text).toBe(429);
    expect(Number(refused.headers.get("Retry-After"))).toBeGreaterThan(0);
    expect(refused.headers.get("RateLimit")).toMatch(/"per-ip";r=0;t=\d+/);
    expect(refused.headers.get("RateLimit-Policy")).toContain('"per-ip"');
    expect(refused.headers.get("Content-Type")).toContain("application/problem+json");
    // per IP: another client is not refused
    expect((await call("/api/items", { ip: `${clientIp}0` })).status).toBe(200);
  });

  it("POST /orders: the handler runs once per Idempotency-Key, with a fencing token; a retry is a replay", async () => {
    const order = (key: string) =>
      call("/orders", {
        method: "POST",
        headers: { "Idempotency-Key": key, "Content-Type": "application/json" },
        body: '{"item":"pear"}',
      });
    const key = crypto.randomUUID();
    const first = await order(key);
    expect(first.status, first.text).toBe(201);
    expect(first.headers.get("Idempotent-Replayed")).toBeNull();
    const created = first.json();
    expect(created.fence).toEqual(expect.any(String));
    expect(created.fence).not.toBe("");

    const retry = await order(key);
    expect(retry.status, retry.text).toBe(201);
    expect(retry.headers.get("Idempotent-Replayed")).toBe("true");
    // the same order (a second run of the handler would have made a new id)
    expect(retry.json()).toEqual(created);

    const another = await order(crypto.randomUUID());
    expect(another.status).toBe(201);
    expect(another.json().id).not.toBe(created.id);
  });

  it("POST /orders without an Idempotency-Key is a 400 (required: true)", async () => {
    const res = await call("/orders", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
    expect(res.status, res.text).toBe(400);
  });
});
