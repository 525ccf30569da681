/** Writes the generated "against @upstash/ratelimit" table into the docs, between their markers. */
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { replaceMarkedBlock } from "./render.js";

/** The files whose marked block the bench regenerates. */
export const ANCHOR_DOCS = ["README.md", "docs/benchmarks.md"];

/** Replaces the marked block of each file with `markdown`; returns the files whose text changed. */
export function writeAnchorDocs(markdown: string, files: readonly string[] = ANCHOR_DOCS): string[] {
  const changed: string[] = [];
  for (const file of files) {
    const path = resolve(file);
    const before = readFileSync(path, "utf8");
    const after = replaceMarkedBlock(before, markdown);
    if (after === before) continue;
    writeFileSync(path, after);
    changed.push(file);
  }
  return changed;
}
