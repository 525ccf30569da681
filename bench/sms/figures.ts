/**
 * Section 13's pure part: what the provider saw (from its arrival times and message bodies), and
 * the section's table, printed and as markdown for docs/benchmarks.md.
 */
import { table } from "../table.js";

/** The body of message `i`: what the provider must receive exactly once. */
export const messageBody = (i: number): string => `sms-${String(i).padStart(5, "0")}`;

/** The most arrivals in any window [t, t + windowMs), sliding over every arrival, and where it starts. */
export function worstWindow(times: readonly number[], windowMs = 1_000): { count: number; fromMs: number } {
  const sorted = [...times].sort((a, b) => a - b);
  let best = { count: 0, fromMs: 0 };
  let end = 0;
  // two pointers: a window starting at an arrival holds the most that any window starting near it does
  for (let start = 0; start < sorted.length; start++) {
    const from = sorted[start] as number;
    while (end < sorted.length && (sorted[end] as number) < from + windowMs) end++;
    if (end - start > best.count) best = { count: end - start, fromMs: from };
  }
  return best;
}

/** Delivered, duplicated and missing messages, from the bodies the provider received. */
export function deliveries(
  offered: readonly string[],
  received: readonly string[],
): { delivered: number; duplicates: number; missing: number; unknown: number } {
  const wanted = new Set(offered);
  const seen = new Map<string, number>();
  for (const body of received) seen.set(body, (seen.get(body) ?? 0) + 1);
  let duplicates = 0;
  let unknown = 0;
  for (const [body, n] of seen) {
    if (!wanted.has(body)) unknown += n;
    else duplicates += n - 1;
  }
  const missing = offered.filter((body) => !seen.has(body)).length;
  return { delivered: received.length - unknown - duplicates, duplicates, missing, unknown };
}

/** What the provider saw in one case. */
export interface ProviderFigures {
  /** Messages offered. */
  offered: number;
  /** Distinct messages the provider received. */
  delivered: number;
  duplicates: number;
  missing: number;
  /** Most arrivals in any one-second window (sliding over every arrival). */
  worst_second: number;
  /** From the first message offered to the last arrival at the provider, ms. */
  total_ms: number;
}

export interface SmsResult {
  options: SmsOptions;
  limit: { rate: number; period: string; algorithm: string; scope: string; margin: string };
  regions: Record<string, number>;
  /** The gateway's answers to the offers: `status decision` → count. */
  answers: Record<string, number>;
  /** Offered through sluice: answered at once (200) then delivered by the consumer (202 queued). */
  sluice: ProviderFigures & {
    direct: number;
    queued: number;
    offer_ms: number;
    /** Admissions read from the sliding log (Redis's clock), and the most of them in any second. */
    admitted: number;
    worst_second_admitted: number;
  };
  /** The same burst sent straight to the provider. */
  straight: ProviderFigures;
  problems: string[];
}

export interface SmsOptions {
  messages: number;
  /** Requests the driver keeps in flight while offering. */
  concurrency: number;
  rate: number;
  /** Miniflare's queue consumer settings. */
  maxBatchSize: number;
  maxBatchTimeoutS: number;
  /** Give up waiting for deliveries after this long, ms. */
  deadlineMs: number;
}

const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

function rows(r: SmsResult): string[][] {
  const s = r.sluice;
  const t = r.straight;
  return [
    ["delivered (of offered)", `${t.delivered} / ${t.offered}`, `${s.delivered} / ${s.offered}`],
    ["duplicates / missing", `${t.duplicates} / ${t.missing}`, `${s.duplicates} / ${s.missing}`],
    [`worst 1 s at the provider (limit ${r.limit.rate})`, String(t.worst_second), String(s.worst_second)],
    ["worst 1 s admitted by the limit (Redis's clock)", "—", `${s.worst_second_admitted} (of ${s.admitted} read)`],
    ["first offer to last delivery", secs(t.total_ms), secs(s.total_ms)],
    ["answered 200 at once / queued (202)", "—", `${s.direct} / ${s.queued}`],
    ["every offer answered after (intake)", "—", `${secs(s.offer_ms)} (${intake(r)}/s)`],
  ];
}

/** The rate at which the gateway took the burst in: offers answered per second. */
const intake = (r: SmsResult) => Math.round(r.sluice.offered / Math.max(r.sluice.offer_ms / 1000, 0.001));

/**
 * Said under the table when the gateway took the burst in slower than the limit: the limit then
 * admitted most messages as they came, and the run says little about the queue.
 */
export function intakeNote(r: SmsResult): string | undefined {
  if (intake(r) > r.limit.rate) return undefined;
  return `The gateway took the burst in at ${intake(r)}/s, below the limit (the driver and the Worker share a loaded machine), so the limit admitted most messages as they came and only ${r.sluice.queued} were queued.`;
}

const HEAD = ["", "straight to the provider", "through sluice (queue)"];

/** The section's lines of the printed table. */
export function renderSmsSection(out: string[], r: SmsResult): void {
  const o = r.options;
  out.push(
    "",
    `13. The SMS case: ${o.messages} messages offered at once (${o.concurrency} in flight) to a queue route, ${r.limit.rate}/${r.limit.period} ${r.limit.algorithm} (margin ${r.limit.margin}) ${r.limit.scope},`,
    `   two regions, two databases (${Object.entries(r.regions)
      .map(([k, n]) => `${k} ${n}`)
      .join(
        ", ",
      )}); Miniflare queue consumer max_batch_size ${o.maxBatchSize}, max_batch_timeout ${o.maxBatchTimeoutS} s`,
    table(HEAD, rows(r)),
    `   worst 1 s = most arrivals at the provider in any window [t, t + 1 s), sliding over every arrival. Answers: ${JSON.stringify(r.answers)}.`,
  );
  const note = intakeNote(r);
  if (note) out.push(`   ${note}`);
}

/** The markdown block between the `bench:sms` markers of docs/benchmarks.md. */
export function renderSmsMarkdown(r: SmsResult, meta: { date: string; revision: string; command: string }): string {
  const o = r.options;
  const line = (cells: string[]) => `| ${cells.join(" | ")} |`;
  return [
    `${o.messages} messages offered at once to a \`queue\` route limited to ${r.limit.rate} per ${r.limit.period} (\`${r.limit.algorithm}\`, \`margin = "${r.limit.margin}"\`, \`scope = "${r.limit.scope}"\`), from two regions with a database each (one Worker per region); queue consumer \`max_batch_size = ${o.maxBatchSize}\`, \`max_batch_timeout = ${o.maxBatchTimeoutS}\` (seconds).`,
    "",
    line(HEAD.map((h) => h || "measure")),
    line(["---", "---:", "---:"]),
    ...rows(r).map(line),
    "",
    ...[intakeNote(r)].flatMap((n) => (n === undefined ? [] : [n, ""])),
    `Measured ${meta.date} at ${meta.revision} with \`${meta.command}\`.`,
  ].join("\n");
}
