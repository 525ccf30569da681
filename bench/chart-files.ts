/**
 * Writes the charts of `bench/charts.ts` as `<dir>/<name>.svg`, each replaced in one step (a write
 * beside it, then a rename), as `bench/run.ts` replaces latest.json.
 */
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Chart } from "./charts.js";

export function writeCharts(dir: string, charts: Chart[]): string[] {
  mkdirSync(dir, { recursive: true });
  return charts.map((chart) => {
    if (!/^[a-z0-9-]+$/.test(chart.name)) throw new Error(`chart name ${JSON.stringify(chart.name)}`);
    const file = join(dir, `${chart.name}.svg`);
    writeFileSync(`${file}.tmp`, chart.svg);
    renameSync(`${file}.tmp`, file);
    return file;
  });
}
