/** The figures of the "against @upstash/ratelimit" section, summed over a shape's rounds on one Worker. */
import { percentile, round } from "../stats.js";
import type { RoundCounts } from "./traffic.js";

export interface SideFigures {
  decisions: number;
  /** Answers other than 200 by status, e.g. `{ "429": 3 }` (every request should be allowed). */
  unexpected: Record<string, number>;
  /** HTTP requests to Redis (the tap): the decisions' script calls and everything else. */
  redis_requests: number;
  script_requests: number;
  other_requests: number;
  /** Commands of the other requests by name (lists, overrides, metrics, …). */
  other_commands: Record<string, number>;
  requests_per_decision: number;
  /** Every command Redis ran in the rounds (INFO commandstats; what Upstash bills). */
  billed: number;
  billed_by_command: Record<string, number>;
  billed_per_decision: number;
  p50_ms: number;
  p99_ms: number;
  /** HTTP requests the other Worker's tap saw during these rounds (its isolates were gone: must be 0). */
  stray_requests: number;
}

const add = (into: Record<string, number>, from: Record<string, number>) => {
  for (const [k, n] of Object.entries(from)) into[k] = (into[k] ?? 0) + n;
};

export function sideFigures(rounds: readonly RoundCounts[]): SideFigures {
  const unexpected: Record<string, number> = {};
  const otherCommands: Record<string, number> = {};
  const billedBy: Record<string, number> = {};
  let scripts = 0;
  let others = 0;
  let stray = 0;
  const ms: number[] = [];
  for (const r of rounds) {
    for (const h of r.hits) {
      ms.push(h.ms);
      if (h.status !== 200) unexpected[String(h.status)] = (unexpected[String(h.status)] ?? 0) + 1;
    }
    scripts += r.tap.decision;
    others += r.tap.other;
    add(otherCommands, r.tap.otherCommands);
    add(billedBy, r.commands);
    stray += r.strayRequests;
  }
  const decisions = ms.length;
  const billed = Object.values(billedBy).reduce((a, b) => a + b, 0);
  const sorted = ms.sort((a, b) => a - b);
  return {
    decisions,
    unexpected,
    redis_requests: scripts + others,
    script_requests: scripts,
    other_requests: others,
    other_commands: otherCommands,
    requests_per_decision: round((scripts + others) / decisions),
    billed,
    billed_by_command: billedBy,
    billed_per_decision: round(billed / decisions),
    p50_ms: round(percentile(sorted, 50), 2),
    p99_ms: round(percentile(sorted, 99), 2),
    stray_requests: stray,
  };
}

export interface ShapeResult {
  key: "sparse" | "hot" | "bursty";
  /** Short, for the tables' rows: "sparse", "hot client", "bursty client". */
  name: string;
  /** With its sizes: "sparse (4 isolates, 1 req/s each for 10 s)". */
  label: string;
  anchor: SideFigures;
  sluice: SideFigures;
}

/** One Worker as built and evaluated. */
export interface WorkerFigures {
  source: string;
  raw_kib: number;
  gzip_kib: number;
  /** wrangler's own "Total Upload" figures, kept to compare (its gzip varies with its module order). */
  wrangler: { raw_kib: number; gzip_kib: number };
  evaluation: { samples: number; median_ms: number; p90_ms: number; min_ms: number };
}

/** The section's part of latest.json. */
export interface AnchorResult {
  anchor_package: string;
  algorithm: string;
  delay_ms: number;
  build_command: string;
  evaluation_method: string;
  options: unknown;
  workers: { anchor: WorkerFigures; sluice: WorkerFigures };
  shapes: ShapeResult[];
  problems: string[];
}
