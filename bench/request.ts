import type { Miniflare } from "miniflare";
import { msSince } from "./stats.js";

export interface Hit {
  /** Wall time of `dispatchFetch` until the whole body was read. */
  ms: number;
  status: number;
  /** The `Sluice-Decision` header ("allow", "degraded", ...), or "" when missing. */
  decision: string;
  /** The `Sluice-Region` header (the region that decided), or "" when missing. */
  region: string;
}

/** Where Cloudflare received the request (`request.cf`), which picks the region. */
export interface Place {
  continent: ContinentCode;
  colo: string;
}

/** One GET through the Worker, as Cloudflare would deliver it from `ip` (at `place`, if given). */
export async function hit(mf: Miniflare, path: string, ip: string, place?: Place): Promise<Hit> {
  const start = process.hrtime.bigint();
  const res = await mf.dispatchFetch(`http://sluice.bench${path}`, {
    headers: { "CF-Connecting-IP": ip },
    ...(place ? { cf: { ...place } } : {}),
  });
  await res.arrayBuffer();
  const ms = msSince(start);
  return {
    ms,
    status: res.status,
    decision: res.headers.get("Sluice-Decision") ?? "",
    region: res.headers.get("Sluice-Region") ?? "",
  };
}

/**
 * Counts of every outcome other than 200 + `expected` decision (+ `expectedRegion`, when given),
 * e.g. `{ "200 degraded": 3 }` or `{ "200 allow region us": 1 }`.
 */
export class Outcomes {
  readonly unexpected: Record<string, number> = {};
  total = 0;

  constructor(
    private readonly expected: string,
    private readonly expectedRegion?: string,
  ) {}

  record(h: Hit): void {
    this.total++;
    const regionOk = this.expectedRegion === undefined || h.region === this.expectedRegion;
    if (h.status === 200 && h.decision === this.expected && regionOk) return;
    const region = regionOk ? "" : ` region ${h.region || "(no Sluice-Region)"}`;
    const label = `${h.status} ${h.decision || "(no Sluice-Decision)"}${region}`;
    this.unexpected[label] = (this.unexpected[label] ?? 0) + 1;
  }

  get unexpectedCount(): number {
    return Object.values(this.unexpected).reduce((a, b) => a + b, 0);
  }
}
