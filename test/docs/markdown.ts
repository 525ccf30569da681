import { readFileSync } from "node:fs";

/** One fenced code block of a Markdown file: its info string (` ```ts snippet-partial ` → "ts snippet-partial"). */
export interface Fence {
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  info: string;
  /** The language: the info string's first word. */
  lang: string;
  code: string;
}

/** Every fenced block of a Markdown file (backtick fences, indented ones too, as the docs write them in lists). */
export function fencesOf(file: string): Fence[] {
  const lines = readFileSync(file, "utf8").split("\n");
  const fences: Fence[] = [];
  let open: { line: number; info: string; indent: string; body: string[] } | undefined;
  lines.forEach((text, i) => {
    const fence = /^(\s*)```(.*)$/.exec(text);
    if (open) {
      if (fence && fence[2]?.trim() === "") {
        const info = open.info.trim();
        fences.push({ file, line: open.line, info, lang: info.split(/\s+/)[0] ?? "", code: open.body.join("\n") });
        open = undefined;
      } else open.body.push(text.startsWith(open.indent) ? text.slice(open.indent.length) : text);
    } else if (fence) open = { line: i + 1, info: fence[2] ?? "", indent: fence[1] ?? "", body: [] };
  });
  if (open) throw new Error(`${file}:${open.line}: a fence that is never closed`);
  return fences;
}
