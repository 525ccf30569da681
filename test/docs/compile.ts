/**
 * Type-checks TypeScript written outside src/ (the docs' snippets) as a user's Worker would:
 * `strict` (and `noUncheckedIndexedAccess`), the Workers' types, `sluice` and every `sluice/*` subpath of package.json's `exports`
 * mapped to the sources they are built from. The files are held in memory, each a module of its
 * own, placed under the repo so that `hono`, `@upstash/*` and the Workers types resolve from its
 * node_modules; nothing is written.
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import ts from "typescript";

const root = resolve(".");

/** package.json's `exports` as `paths`: "./dist/middleware/rate-limit.d.ts" is built from "src/middleware/rate-limit.ts". */
function sluicePaths(): Record<string, string[]> {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
    exports: Record<string, { types: string }>;
  };
  return Object.fromEntries(
    Object.entries(pkg.exports).map(([subpath, { types }]) => [
      subpath === "." ? "sluice" : `sluice/${subpath.slice(2)}`,
      [types.replace(/^\.\/dist\//, "./src/").replace(/\.d\.ts$/, ".ts")],
    ]),
  );
}

const OPTIONS: ts.CompilerOptions = {
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.ES2022,
  moduleResolution: ts.ModuleResolutionKind.Bundler,
  moduleDetection: ts.ModuleDetectionKind.Force,
  lib: ["lib.es2022.d.ts"],
  // src/ is checked with Node's types beside the Workers' (tsconfig.json): its timers need both
  types: ["@cloudflare/workers-types", "@types/node"],
  jsx: ts.JsxEmit.ReactJSX,
  jsxImportSource: "hono/jsx",
  strict: true,
  noUncheckedIndexedAccess: true,
  isolatedModules: true,
  esModuleInterop: true,
  skipLibCheck: true,
  noEmit: true,
  baseUrl: root,
  paths: sluicePaths(),
};

/** One error, with the line (1-based) in the file it was found in and the message as tsc prints it. */
export interface Diagnostic {
  file: string;
  line: number;
  message: string;
}

/**
 * Compiles the given files (name → source) together and gives each one's errors; an error found
 * elsewhere (in a library's types, or a file they import) is listed under "".
 */
export function typeCheck(files: Record<string, string>): Map<string, Diagnostic[]> {
  const dir = join(root, ".snippets");
  const inMemory = new Map(Object.entries(files).map(([name, text]) => [join(dir, name), text]));
  const host = ts.createCompilerHost(OPTIONS, true);
  const { fileExists, readFile, getSourceFile } = host;
  host.fileExists = (f) => inMemory.has(f) || fileExists.call(host, f);
  host.readFile = (f) => inMemory.get(f) ?? readFile.call(host, f);
  host.getSourceFile = (f, language, onError, fresh) => {
    const text = inMemory.get(f);
    return text === undefined
      ? getSourceFile.call(host, f, language, onError, fresh)
      : ts.createSourceFile(f, text, language, true);
  };
  // src/lua.d.ts: the sources import the Lua scripts as text modules
  const program = ts.createProgram([...inMemory.keys(), join(root, "src/lua.d.ts")], OPTIONS, host);
  const found = new Map<string, Diagnostic[]>([
    ["", []],
    ...Object.keys(files).map((n) => [n, []] as [string, Diagnostic[]]),
  ]);
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const path = d.file?.fileName ?? "";
    const name = inMemory.has(path) ? path.slice(dir.length + 1) : "";
    const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : 0;
    found.get(name)?.push({ file: path, line, message: ts.flattenDiagnosticMessageText(d.messageText, "\n") });
  }
  return found;
}
