/** Section 12 in the bench's output: its sizes, its stdout table, and the docs it regenerates. */
import { writeAnchorDocs } from "./docs.js";
import type { AnchorOptions } from "./index.js";
import type { AnchorResult } from "./figures.js";
import { renderAnchorMarkdown, renderAnchorTable } from "./render.js";

export const ANCHOR_FULL: AnchorOptions = {
  rounds: { sparse: 2, hot: 4, bursty: 4 },
  delayMs: 20,
  settleMs: 500,
  sparse: { isolates: 4, seconds: 10, ips: 4 },
  hot: { warmup: 10, requests: 150 },
  bursty: { warmup: 10, bursts: 8, size: 20, pauseMs: 300 },
  evaluations: 25,
};

export const ANCHOR_QUICK: AnchorOptions = {
  rounds: { sparse: 1, hot: 1, bursty: 1 },
  delayMs: 20,
  settleMs: 500,
  sparse: { isolates: 4, seconds: 3, ips: 4 },
  hot: { warmup: 5, requests: 40 },
  bursty: { warmup: 5, bursts: 3, size: 20, pauseMs: 300 },
  evaluations: 3,
};

/** The section's lines of the printed table. */
export function renderAnchorSection(out: string[], r: AnchorResult): void {
  out.push(
    "",
    `12. Against ${r.anchor_package}: the same Hono Worker (bench/workers/anchor.ts, bench/workers/sluice.ts), ${r.algorithm}`,
    `   Both on one Redis behind one bridge (+${r.delay_ms} ms a round trip), a tap per Worker, fresh isolates per round, rounds interleaved`,
    renderAnchorTable(r),
    "   Redis HTTP requests = everything the Worker sent to Redis (tap); billed commands = everything Redis ran in the Worker's rounds",
    "   (INFO commandstats, background work included) ÷ decisions; p50/p99 = dispatchFetch until the body was read, every decision.",
    `   Bundles: ${r.build_command}, sizes as wrangler's "Total Upload" line, modules in a fixed order. Evaluation: ${r.evaluation_method}.`,
  );
  for (const s of r.shapes)
    out.push(
      `   ${s.key}: other requests anchor ${JSON.stringify(s.anchor.other_commands)}, sluice ${JSON.stringify(s.sluice.other_commands)};` +
        ` billed sluice ${JSON.stringify(s.sluice.billed_by_command)} over ${s.sluice.decisions} decisions`,
    );
}

/** Rewrites the marked tables of README.md and docs/benchmarks.md; returns the files changed. */
export function publishAnchor(r: AnchorResult, meta: { started: Date; revision: string; command: string }): string[] {
  const markdown = renderAnchorMarkdown(r, {
    date: meta.started.toISOString().slice(0, 10),
    revision: meta.revision,
    command: meta.command,
  });
  return writeAnchorDocs(markdown);
}
