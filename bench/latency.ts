/**
 * Latency of an allowed request through sluice (limiting on, one EVALSHA per request) against
 * the same bundle with limiting off (`SLUICE = { routes: [] }`: forwarded without Redis).
 * Variants are measured in interleaved blocks so that drift on the machine (another process,
 * CPU frequency, GC) lands on every variant alike instead of on whichever ran last.
 */
import type { Miniflare } from "miniflare";
import { hit, Outcomes } from "./request.js";
import { type IpSource, round, type Summary, summarise } from "./stats.js";

export interface Variant {
  key: string;
  label: string;
  mf: Miniflare;
  path: string;
  /** The Sluice-Decision every response should carry. */
  expect: string;
}

export interface SequentialVariant {
  key: string;
  label: string;
  path: string;
  latency: Summary;
  unexpected_outcomes: Record<string, number>;
}

export interface ConcurrentVariant extends SequentialVariant {
  wall_ms: number;
  throughput_rps: number;
}

export interface Added {
  variant: string;
  /** Against the variant with limiting off. */
  added_median_ms: number;
  added_p99_ms: number;
  throughput_ratio?: number;
}

export interface LatencyResult {
  sequential: { warmup: number; requests: number; block: number; variants: SequentialVariant[]; added: Added[] };
  concurrent: {
    clients: number;
    warmup: number;
    requests: number;
    rounds: number;
    variants: ConcurrentVariant[];
    added: Added[];
  };
}

export interface LatencyOptions {
  warmup: number;
  requests: number;
  block: number;
  clients: number;
  concurrentRequests: number;
  rounds: number;
}

/** `variants[0]` is the baseline (limiting off). */
export async function measureLatency(variants: Variant[], ips: IpSource, opts: LatencyOptions): Promise<LatencyResult> {
  const sequential = await sequentialRuns(variants, ips, opts);
  const concurrent = await concurrentRuns(variants, ips, opts);
  return {
    sequential: {
      warmup: opts.warmup,
      requests: opts.requests,
      block: opts.block,
      variants: sequential,
      added: addedOver(sequential),
    },
    concurrent: {
      clients: opts.clients,
      warmup: opts.warmup,
      requests: opts.concurrentRequests,
      rounds: opts.rounds,
      variants: concurrent,
      added: addedOver(concurrent),
    },
  };
}

async function sequentialRuns(variants: Variant[], ips: IpSource, opts: LatencyOptions): Promise<SequentialVariant[]> {
  for (const v of variants) for (let i = 0; i < opts.warmup; i++) await hit(v.mf, v.path, ips.take());
  const samples = variants.map(() => [] as number[]);
  const outcomes = variants.map((v) => new Outcomes(v.expect));
  for (let done = 0; done < opts.requests; done += opts.block) {
    const size = Math.min(opts.block, opts.requests - done);
    for (const [vi, v] of variants.entries()) {
      for (let i = 0; i < size; i++) {
        const h = await hit(v.mf, v.path, ips.take());
        samples[vi]?.push(h.ms);
        outcomes[vi]?.record(h);
      }
    }
  }
  return variants.map((v, vi) => ({
    key: v.key,
    label: v.label,
    path: v.path,
    latency: summarise(samples[vi] ?? []),
    unexpected_outcomes: outcomes[vi]?.unexpected ?? {},
  }));
}

async function concurrentRuns(variants: Variant[], ips: IpSource, opts: LatencyOptions): Promise<ConcurrentVariant[]> {
  for (const v of variants) await burst(v, ips, opts.clients, opts.warmup, new Outcomes(v.expect));
  const samples = variants.map(() => [] as number[]);
  const wall = variants.map(() => 0);
  const outcomes = variants.map((v) => new Outcomes(v.expect));
  const perRound = Math.ceil(opts.concurrentRequests / opts.rounds);
  for (let round = 0; round < opts.rounds; round++) {
    const size = Math.min(perRound, opts.concurrentRequests - round * perRound);
    // Alternate the order between rounds as well, so no variant always runs first.
    const order = round % 2 === 0 ? [...variants.keys()] : [...variants.keys()].reverse();
    for (const vi of order) {
      const v = variants[vi] as Variant;
      const r = await burst(v, ips, opts.clients, size, outcomes[vi] as Outcomes);
      samples[vi]?.push(...r.samples);
      wall[vi] = (wall[vi] ?? 0) + r.wallMs;
    }
  }
  return variants.map((v, vi) => {
    const ms = wall[vi] ?? 0;
    const count = samples[vi]?.length ?? 0;
    return {
      key: v.key,
      label: v.label,
      path: v.path,
      latency: summarise(samples[vi] ?? []),
      wall_ms: round(ms, 1),
      throughput_rps: round((count / ms) * 1000, 1),
      unexpected_outcomes: outcomes[vi]?.unexpected ?? {},
    };
  });
}

/** `total` requests spread over `clients` concurrent loops, each sending the next as soon as one is answered. */
async function burst(
  v: Variant,
  ips: IpSource,
  clients: number,
  total: number,
  outcomes: Outcomes,
): Promise<{ samples: number[]; wallMs: number }> {
  const samples: number[] = [];
  let issued = 0;
  const start = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (issued < total) {
        issued++;
        const h = await hit(v.mf, v.path, ips.take());
        samples.push(h.ms);
        outcomes.record(h);
      }
    }),
  );
  return { samples, wallMs: Number(process.hrtime.bigint() - start) / 1e6 };
}

function addedOver(results: Array<SequentialVariant & { throughput_rps?: number }>): Added[] {
  const [base, ...rest] = results;
  if (!base) return [];
  return rest.map((r) => ({
    variant: r.key,
    added_median_ms: round(r.latency.median_ms - base.latency.median_ms),
    added_p99_ms: round(r.latency.p99_ms - base.latency.p99_ms),
    ...(r.throughput_rps !== undefined && base.throughput_rps
      ? { throughput_ratio: round(r.throughput_rps / base.throughput_rps) }
      : {}),
  }));
}
