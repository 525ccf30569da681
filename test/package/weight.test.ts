/**
 * What a Worker carries for the sluice it imports: a Hono Worker whose only sluice import is
 * `rateLimit` is bundled as wrangler bundles it (esbuild: ESM, the workerd conditions, minified,
 * a metafile), and the metafile's inputs are the modules it carries. The gateway's composed
 * schema, the shedding options' schemas (fallback, divert, queue), the admin and dashboard,
 * idempotency, sessions, the MCP gateway, the queue, zod's classic API,
 * `@upstash/redis` (Redis from the environment goes through sluice's own REST client), JWT
 * verification (verifyJwt()'s) and the lists' isolate copy (accessLists()'s) must not be among
 * them, whether `rateLimit` comes from `sluice/rate-limit` or from the root. Sizes are not
 * asserted here (`npm run bench`, section 12, measures them): the modules are, deterministically.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build, type Metafile } from "esbuild";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const WORKER = "bench/workers/weight-rate-limit.ts";

/** Modules a rateLimit-only Worker must not carry, and why each is someone else's. */
const LEFT_OUT: Array<[RegExp, string]> = [
  [/^src\/admin\//, "the admin API and the dashboard"],
  [/^src\/features\/guard\/(?!idempotency\/refusal\.ts$)/, "idempotency and sessions (the guard)"],
  [/^src\/(features\/mcp\/|metrics\/mcp\.ts$)/, "the MCP gateway"],
  [/^src\/features\/shedding\/(queue|fallback)\//, "the queue and the fallback copies"],
  [/^src\/features\/shedding\/schema\.ts$/, "the shedding options' schemas: a middleware's route takes their defaults"],
  [/^src\/features\/breaker\//, "the breaker"],
  [/^src\/config\/(schema|index|cache)\.ts$/, "the gateway's composed configuration schema"],
  [/^src\/(gateway|pipeline\/steps\.ts|pipeline\/forward\.ts)/, "the gateway's app and pipeline"],
  [/^lua\/(idempotency|session|admin-session)\.lua$/, "the scripts of idempotency, sessions and the admin"],
  [/node_modules\/zod\/(v4\/classic|v4\/locales\/(?!en\.js$)|v3)\//, "zod's classic API and its other locales"],
  [/node_modules\/@upstash\/redis\//, "@upstash/redis: Redis from the environment is sluice's own REST client"],
  [/^src\/features\/jwt\/(jwt|step)\.ts$|node_modules\/hono\/dist\/utils\/jwt\//, "JWT verification: verifyJwt()'s"],
  [/^src\/features\/access\/(lists|list-index|step)\.ts$/, "the lists' isolate copy: accessLists()'s"],
];

/** Bundles a Worker as `wrangler deploy --minify` does, and gives the modules in its output. */
async function bundledModules(source: string): Promise<{ modules: string[]; metafile: Metafile }> {
  const result = await build({
    absWorkingDir: root,
    stdin: { contents: source, resolveDir: join(root, "bench", "workers"), sourcefile: "worker.ts", loader: "ts" },
    bundle: true,
    write: false,
    format: "esm",
    platform: "neutral",
    conditions: ["workerd", "worker", "browser"],
    mainFields: ["browser", "module", "main"],
    minify: true,
    loader: { ".lua": "text" },
    metafile: true,
    logLevel: "silent",
  });
  const output = Object.values(result.metafile.outputs)[0];
  const modules = Object.entries(output?.inputs ?? {})
    .filter(([, input]) => input.bytesInOutput > 0)
    .map(([path]) => path);
  return { modules, metafile: result.metafile };
}

const carriedWrongly = (modules: string[]) =>
  modules.flatMap((m) => LEFT_OUT.filter(([pattern]) => pattern.test(m)).map(([, what]) => `${m} (${what})`));

describe("a Worker carries only what it uses", () => {
  it("rateLimit from sluice/rate-limit: the limits, without the gateway's schema, admin, idempotency, MCP or queue", async () => {
    const { modules } = await bundledModules(readFileSync(join(root, WORKER), "utf8"));
    expect(carriedWrongly(modules)).toEqual([]);
    // what it does carry: the limits, their script, the feature's own schema on zod/mini
    expect(modules).toContain("src/features/rate-limit/step.ts");
    expect(modules).toContain("lua/decide.lua");
    expect(modules).toContain("src/features/rate-limit/schema.ts");
    // Redis configured by the Worker's env: sluice's own REST client, not @upstash/redis
    expect(modules).toContain("src/store/rest-client.ts");
    expect(modules.some((m) => m.includes("node_modules/zod/v4/mini/"))).toBe(true);
    // nothing of the MCP gateway by any path: its step, schema, figures (a package's path read from
    // its node_modules/ on, so that the checkout's own folder names never count)
    expect(modules.filter((m) => /mcp/i.test(m.replace(/^.*node_modules\//, "")))).toEqual([]);
  });

  it("rateLimit from the root entry tree-shakes to the same modules", async () => {
    const subpath = await bundledModules(readFileSync(join(root, WORKER), "utf8"));
    const source = readFileSync(join(root, WORKER), "utf8").replace(
      "../../src/middleware/rate-limit.js",
      "../../src/index.js",
    );
    const { modules } = await bundledModules(source);
    expect(carriedWrongly(modules)).toEqual([]);
    expect([...modules].sort()).toEqual([...subpath.modules].sort());
  });

  it("sluice(config) does carry the MCP gateway: the check above would see it", async () => {
    const source = [
      'import { sluice } from "../../src/index.js";',
      "export default { fetch: (r: Request) => sluice({ routes: [] }).toString() && new Response(String(r.url)) };",
    ].join("\n");
    const { modules } = await bundledModules(source);
    expect(modules).toContain("src/features/mcp/step.ts");
  });

  it("a Worker using only Problem carries no configuration schema and no zod", async () => {
    const source = [
      'import { Hono } from "hono";',
      'import { Problem } from "../../src/index.js";',
      "const app = new Hono();",
      'app.get("*", () => { throw new Problem({ status: 418, title: "No" }); });',
      "export default app;",
    ].join("\n");
    const { modules } = await bundledModules(source);
    expect(modules.filter((m) => m.includes("node_modules/zod/") || m.startsWith("src/config/"))).toEqual([]);
    expect(modules).toContain("src/problem.ts");
  });
});
