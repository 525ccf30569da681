/**
 * The cost of evaluating a Worker's bundle once (a cold start's share): `evaluate-bundle.mjs` in a
 * fresh Node process per sample (same V8 as workerd, no code cache, no workerd start-up whose
 * hundreds of milliseconds of noise would drown the difference), the two Workers interleaved.
 */
import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { promisify } from "node:util";
import type { BuiltWorker, Side } from "./build.js";
import { percentile, round } from "../stats.js";

const run = promisify(execFile);
const CHILD = resolve("bench/anchor/evaluate-bundle.mjs");

export interface EvaluationFigures {
  samples: number;
  median_ms: number;
  p90_ms: number;
  min_ms: number;
}

/** One sample: a fresh process evaluates the bundle; its own measurement, ms. */
async function evaluateOnce(bundle: string): Promise<number> {
  const { stdout } = await run(process.execPath, ["--experimental-vm-modules", "--no-warnings", CHILD, bundle], {
    timeout: 60_000,
  });
  const parsed = JSON.parse(stdout.trim()) as { ms?: unknown };
  if (typeof parsed.ms !== "number") throw new Error(`evaluate-bundle.mjs printed ${stdout.slice(0, 200)}`);
  return parsed.ms;
}

/** `samples` evaluations of each Worker, interleaved (one of each in turn), after one unrecorded each. */
export async function measureEvaluation(
  workers: readonly BuiltWorker[],
  samples: number,
): Promise<Record<Side, EvaluationFigures>> {
  const times = new Map<Side, number[]>(workers.map((w) => [w.side, []]));
  for (const w of workers) await evaluateOnce(w.bundle); // file cache warm for both alike
  for (let i = 0; i < samples; i++) for (const w of workers) times.get(w.side)?.push(await evaluateOnce(w.bundle));
  const out = {} as Record<Side, EvaluationFigures>;
  for (const [side, ms] of times) {
    const sorted = [...ms].sort((a, b) => a - b);
    out[side] = {
      samples: sorted.length,
      median_ms: round(percentile(sorted, 50), 2),
      p90_ms: round(percentile(sorted, 90), 2),
      min_ms: round(sorted[0] ?? Number.NaN, 2),
    };
  }
  return out;
}
