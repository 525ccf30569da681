/** The bench's printed tables: a header, a rule, rows; the first column left-aligned, the others right. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    `   ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join("  │  ")}`;
  const rule = `   ${widths.map((w) => "─".repeat(w)).join("──┼──")}`;
  return [line(header), rule, ...rows.map(line)].join("\n");
}

/** An integer as is, anything else to 3 decimals. */
export const fmt = (n: number): string => (Number.isInteger(n) ? String(n) : n.toFixed(3));
