// Run by bench/anchor/evaluation.ts in a fresh `node --experimental-vm-modules` process per sample:
// evaluates a Worker bundle built by wrangler once, as an isolate's cold start does (parse, compile,
// link, run the top level), and prints how long that took. Text modules (the .lua files wrangler
// emits beside the bundle) are read before the clock starts and linked as modules whose default
// export is their text, as workerd links them. No caches: every sample is a process of its own.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import vm from "node:vm";

const [bundle] = process.argv.slice(2);
if (!bundle) throw new Error("usage: evaluate-bundle.mjs <bundle.js>");
const source = readFileSync(bundle, "utf8");
const texts = new Map();
for (const [, spec] of source.matchAll(/from\s*"(\.\/[^"]+\.lua)"/g))
  texts.set(spec, readFileSync(join(dirname(bundle), spec), "utf8"));

const textModule = (spec) =>
  new vm.SyntheticModule(["default"], function () {
    this.setExport("default", texts.get(spec));
  });

const start = performance.now();
const main = new vm.SourceTextModule(source, { identifier: bundle });
await main.link((spec) => {
  if (!texts.has(spec)) throw new Error(`unexpected import ${spec} in ${bundle}`);
  return textModule(spec);
});
await main.evaluate();
const ms = performance.now() - start;

const worker = main.namespace.default;
if (typeof worker?.fetch !== "function") throw new Error(`${bundle}: its default export has no fetch handler`);
process.stdout.write(`${JSON.stringify({ ms })}\n`);
