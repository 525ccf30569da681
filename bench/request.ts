import type { Miniflare } from "miniflare";
import { msSince } from "./stats.js";

export interface Hit {
  /** Wall time of `dispatchFetch` until the whole body was read. */
  ms: number;
  status: number;
  /** The `Sluice-Decision` header ("allow", "degraded", ...), or "" when missing. */
  decision: string;
}

/** One GET through the Worker, as Cloudflare would deliver it from `ip`. */
export async function hit(mf: Miniflare, path: string, ip: string): Promise<Hit> {
  const start = process.hrtime.bigint();
  const res = await mf.dispatchFetch(`http://sluice.bench${path}`, { headers: { "CF-Connecting-IP": ip } });
  await res.arrayBuffer();
  const ms = msSince(start);
  return { ms, status: res.status, decision: res.headers.get("Sluice-Decision") ?? "" };
}

/** Counts of every outcome other than 200 + `expected` decision, e.g. `{ "200 degraded": 3 }`. */
export class Outcomes {
  readonly unexpected: Record<string, number> = {};
  total = 0;

  constructor(private readonly expected: string) {}

  record(h: Hit): void {
    this.total++;
    if (h.status === 200 && h.decision === this.expected) return;
    const label = `${h.status} ${h.decision || "(no Sluice-Decision)"}`;
    this.unexpected[label] = (this.unexpected[label] ?? 0) + 1;
  }

  get unexpectedCount(): number {
    return Object.values(this.unexpected).reduce((a, b) => a + b, 0);
  }
}
