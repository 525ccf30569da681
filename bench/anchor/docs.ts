/** Writes the generated "against @upstash/ratelimit" table into the docs, between their markers. */
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { ANCHOR_MARKERS, type Markers, replaceMarkedBlock } from "./render.js";

/** The files whose marked block the bench regenerates. */
export const ANCHOR_DOCS = ["README.md", "docs/benchmarks.md"];

/**
 * Replaces the marked block (the anchor's, unless other `markers` are given) of each file with
 * `markdown`; returns the files whose text changed.
 */
export function writeAnchorDocs(
  markdown: string,
  files: readonly string[] = ANCHOR_DOCS,
  markers: Markers = ANCHOR_MARKERS,
): string[] {
  const changed: string[] = [];
  for (const file of files) {
    const path = resolve(file);
    const before = readFileSync(path, "utf8");
    const after = replaceMarkedBlock(before, markdown, markers);
    if (after === before) continue;
    writeFileSync(path, after);
    changed.push(file);
  }
  return changed;
}
