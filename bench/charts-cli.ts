/**
 * `npm run bench:charts -- [results.json] [--out dir]`: the SVG charts of a bench run, from its JSON,
 * without running anything. Defaults: bench/results/latest.json into bench/results/charts (where a
 * full `npm run bench` writes them).
 */
import { readFileSync } from "node:fs";
import { relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { writeCharts } from "./chart-files.js";
import { type BenchResults, chartsFromResults, runName } from "./charts.js";

function main(): void {
  const { values, positionals } = parseArgs({
    options: { out: { type: "string", default: "bench/results/charts" } },
    allowPositionals: true,
  });
  if (positionals.length > 1) throw new Error("usage: npm run bench:charts -- [results.json] [--out dir]");
  const input = resolve(positionals[0] ?? "bench/results/latest.json");
  const result = JSON.parse(readFileSync(input, "utf8")) as BenchResults;
  if (typeof result !== "object" || result === null || typeof result.started_at !== "string")
    throw new Error(`${input} is not the JSON of a bench run (no started_at)`);
  const files = writeCharts(resolve(values.out), chartsFromResults(result));
  console.log(`charts of run ${runName(result)}:`);
  for (const file of files) console.log(`  ${relative(process.cwd(), file)}`);
}

try {
  main();
} catch (error: unknown) {
  console.error(`bench:charts: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
}
