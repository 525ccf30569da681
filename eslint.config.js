// @ts-check
import { readdirSync } from "node:fs";
import { defineConfig } from "eslint/config";
import { createTypeScriptImportResolver } from "eslint-import-resolver-typescript";
import { importX } from "eslint-plugin-import-x";
import tseslint from "typescript-eslint";
import importCycles from "./dev/eslint-import-cycles.mjs";

/**
 * The tools stand apart from the product and from the tests (docs/architecture.md): dev/ and bench/
 * are workspaces of their own, the tests take the local stack only through `@sluice/dev`
 * (dev/index.ts, the entry its package.json exports), and nothing imports test/ but the tests.
 */
const toolZones = [
  {
    target: ["./src/**/!(*.test).ts", "./src/**/*.tsx", "./worker"],
    from: ["./dev", "./bench", "./test"],
    message: "the product imports none of the tools (dev/, bench/) and none of the tests",
  },
  {
    target: ["./dev", "./bench"],
    from: "./test",
    message: "the tools never import the tests: code both need lives in dev/ (`@sluice/dev`)",
  },
  {
    target: ["./test", "./src/**/*.test.ts", "./dev"],
    from: "./bench",
    message: "nothing imports the bench: the tests and dev/ stand below it",
  },
  {
    target: ["./test", "./src/**/*.test.ts", "./bench"],
    from: "./dev",
    except: ["./index.ts"],
    message: 'the local stack is `import { … } from "@sluice/dev"` (dev/index.ts), never a file under dev/',
  },
];

/**
 * Which other capability folders under src/features/ each may import: only where an adapter calls a
 * core (docs/architecture.md, Cores and adapters); a capability not named here (a new one included)
 * imports none. What a capability does on another's behalf (a ban counted on a refusal, a token's
 * claims for the lists) is handed in where the steps are composed.
 * @type {Record<string, string[]>}
 */
const CAPABILITY_CALLS = {
  access: ["shedding"], // the degrade switch answers through the shedder
  breaker: ["shedding"], // an open breaker answers through the shedder
  mcp: ["guard", "rate-limit"], // the MCP adapter over the guard and rate-limit cores
  shedding: ["guard", "rate-limit"], // the queue consumer over both cores; the shedder's 429
};

const capabilities = readdirSync(new URL("./src/features", import.meta.url), { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name);

const capabilityZones = capabilities.map((capability) => {
  const calls = CAPABILITY_CALLS[capability] ?? [];
  const allowed = calls.length > 0 ? `of the other capabilities only ${calls.join(" and ")}` : "no other capability";
  return {
    target: `src/features/${capability}/**/!(*.test).ts`,
    from: capabilities
      .filter((other) => other !== capability && !calls.includes(other))
      .map((other) => `src/features/${other}/**`),
    message: `src/features/${capability}/ imports ${allowed}: hand in what it needs of another where the steps are composed, or move what both need below both`,
  };
});

const tsFiles = [
  "src/**/*.ts",
  "src/**/*.tsx",
  "worker/**/*.ts",
  "test/**/*.ts",
  "dev/**/*.ts",
  "bench/**/*.ts",
  "examples/**/*.ts",
];

export default defineConfig(
  {
    ignores: ["**/node_modules/**", "dist/**", ".wrangler/**", "bench/results/**", "examples/*/node_modules/**"],
  },
  {
    files: tsFiles,
    extends: [tseslint.configs.recommended],
    plugins: { "import-x": importX, sluice: importCycles },
    settings: {
      // The code imports "./x.js" for x.ts (ESM as emitted): the TypeScript resolver maps those
      // specifiers back to the sources, without which no-cycle would see no edges and pass vacuously.
      "import-x/resolver-next": [createTypeScriptImportResolver({ project: "./tsconfig.json" })],
      "import-x/extensions": [".ts", ".tsx", ".js"],
      "import-x/parsers": { "@typescript-eslint/parser": [".ts", ".tsx"] },
    },
    rules: {
      // The project must stay free of import cycles. import-x/no-cycle skips type-only imports;
      // sluice/no-import-cycle counts them too (a circle of types is still a circle of meaning).
      "import-x/no-cycle": "error",
      "sluice/no-import-cycle": "error",
      "@typescript-eslint/no-unused-vars": [
        "error",
        { args: "after-used", argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" },
      ],
    },
  },
  {
    // Stated for src/ on its own so that relaxing the shared set (say, for tests) never relaxes the app.
    files: ["src/**/*.ts", "src/**/*.tsx"],
    rules: {
      "@typescript-eslint/no-explicit-any": "error",
      // Log lines go through src/util/log.ts, so every line is one JSON object with `event` first.
      "no-console": "error",
      // A failure swallowed by an anonymous `.catch(() => undefined)` is invisible: deferred work
      // goes through settleQuietly/orElse (which log what failed), a dropped body through discardBody.
      "no-restricted-syntax": [
        "error",
        {
          selector:
            "CallExpression[callee.property.name='catch'] > ArrowFunctionExpression.arguments[params.length=0][body.type=/^(Identifier|Literal|ArrayExpression|ObjectExpression|UnaryExpression)$/]",
          message:
            "Do not swallow a failure: use settleQuietly/orElse (src/util/log.ts), which log what failed, or a named helper saying why it does not matter.",
        },
        {
          selector:
            "CallExpression[callee.property.name='catch'] > :function.arguments[body.type='BlockStatement'][body.body.length=0]",
          message:
            "Do not swallow a failure: use settleQuietly/orElse (src/util/log.ts), which log what failed, or a named helper saying why it does not matter.",
        },
      ],
    },
  },
  {
    // The layering (docs/architecture.md): each zone is an import that would run back up it. One
    // shell: the library entry and the pipeline both mounts use import nothing of the Worker.
    files: ["src/**/*.ts", "src/**/*.tsx"],
    rules: {
      "import-x/no-restricted-paths": [
        "error",
        {
          zones: [
            {
              target: ["./src/index.ts", "./src/middleware", "./src/pipeline"],
              from: ["./src/app.ts", "./src/gateway", "./worker"],
              message: "The library entry and the pipeline import nothing of the Worker.",
            },

            {
              // no capability, its step and admin routes included, reaches up into the request
              // pipeline, the shells (the middleware's, the library entry, the Worker's) or the admin:
              // they mount the capabilities; what the admin routes share is src/operator/, below them.
              // The tests beside the code drive a capability through the package's public face.
              target: "src/features/**/!(*.test).ts",
              from: ["src/pipeline/**", "src/middleware/**", "src/admin/**", "src/{index.ts,gateway/**}", "worker/**"],
              message: "a capability imports the pipeline, a shell (middleware, library entry, Worker) or the admin",
            },
            {
              // a capability's domain logic and the shared machinery never reach up into the steps or
              // a capability's admin routes (an adapter's seam onto the capabilities, such as
              // src/features/mcp/cores.ts, is at the steps' level: it asks what a step would)
              target: [
                "src/features/**/!(step|admin*|cores|*.test).ts",
                "src/config/**",
                "src/identity/**",
                "src/metrics/**",
                "src/operator/**",
                "src/origin/**",
                "src/region/**",
                "src/routing/**",
                "src/store/**",
                "src/util/**",
              ],
              from: [
                "src/features/**/step.ts",
                "src/features/**/admin*.ts",
                "src/middleware/**",
                "src/pipeline/**",
                "src/admin/**",
                "src/{index.ts,gateway/**}",
              ],
              message: "a capability or shared module imports a step, admin routes, the pipeline, a shell or the admin",
            },
            {
              // the shared machinery below the capabilities knows none of them (src/config/ composes
              // the capabilities' schemas, so it is not among these)
              target: [
                "src/identity/**",
                "src/metrics/**",
                "src/operator/**",
                "src/origin/**",
                "src/region/**",
                "src/routing/**",
                "src/store/**",
                "src/util/**",
                "src/env.ts",
                "src/problem.ts",
                "src/problem-types.ts",
              ],
              from: ["src/features/**"],
              message: "shared machinery imports a capability: move what both need below both",
            },
            {
              target: "src/features/**/step.ts",
              from: "src/features/**/admin*.ts",
              message: "a capability's step imports admin routes",
            },
            {
              target: "src/features/**/admin*.ts",
              from: "src/features/**/step.ts",
              message: "a capability's admin routes import a step",
            },
            {
              // A test beside the code may build its input with loadConfig, as a caller would.
              target: [
                "src/store/**/!(*.test).ts",
                "src/identity/**/!(*.test).ts",
                "src/util/**/!(*.test).ts",
                "src/routing/**/!(*.test).ts",
              ],
              from: ["src/config"],
              message: "the store, identity, the utilities and routing know no configuration: pass them what they need",
            },
            {
              target: [
                "src/store/**",
                "src/util/**",
                "src/identity/**",
                "src/operator/**",
                "src/routing/**",
                "src/features/rate-limit/**/!(step|*.test).ts",
                "src/config/**",
              ],
              from: ["src/context.ts", "src/runtime.ts"],
              message: "a low module imports the request scope or the isolate's runtime",
            },
            {
              // each capability keeps its isolate state through `Runtime.own`: the runtime stands below them all
              target: "src/runtime.ts",
              from: ["src/admin/**", "src/features/**", "src/middleware/**", "src/pipeline/**", "src/gateway/**"],
              message:
                "the isolate's runtime imports no capability, admin, shell or pipeline: they keep their state in it through `own`",
            },
            ...capabilityZones,
            ...toolZones,
          ],
        },
      ],
    },
  },
  {
    // The tools' zones for the files outside src/ (src/'s block above lists them with its own, as a
    // later block's zones would replace that block's for the same files).
    files: ["worker/**/*.ts", "test/**/*.ts", "dev/**/*.ts", "bench/**/*.ts"],
    rules: { "import-x/no-restricted-paths": ["error", { zones: toolZones }] },
  },
  {
    // The one module that writes log lines.
    files: ["src/util/log.ts"],
    rules: { "no-console": "off" },
  },
  {
    // No value import of @upstash/redis anywhere in src/. sluice talks to Upstash with its own REST
    // client (src/store/rest-client.ts): a value import would put that whole client in every Worker;
    // a caller's own client is accepted by its shape (src/store/client.ts), so types may come from it.
    // And Redis goes only through the runner (src/store/redis.ts: deadline, circuit, round-trip
    // estimate), so outside src/store/ no code holds a client at all.
    files: ["src/**/*.ts", "src/**/*.tsx"],
    ignores: ["src/**/*.test.ts"],
    rules: {
      "@typescript-eslint/no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              group: ["@upstash/redis", "@upstash/redis/*"],
              allowTypeImports: true,
              message:
                "No value import of @upstash/redis in src/: sluice's own client is src/store/rest-client.ts, a caller's client is a RedisClient (src/store/client.ts), and Redis goes through Store (src/store/redis.ts).",
            },
          ],
        },
      ],
    },
  },
  {
    // `Store` does not hand its client out (TypeScript refuses `store.redis`); this refuses a client
    // reached some other way. Tests may drive Redis directly to set up and inspect it.
    files: ["src/**/*.ts", "src/**/*.tsx"],
    ignores: ["src/store/**", "src/**/*.test.ts"],
    rules: {
      "no-restricted-syntax": [
        "error",
        {
          selector: "MemberExpression[object.type='MemberExpression'][object.property.name='redis']",
          message:
            "No `.redis.*` outside src/store/: use the Store's typed commands (keys, hash, stream, pipeline, run).",
        },
      ],
    },
  },
);
