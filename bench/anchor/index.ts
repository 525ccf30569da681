/**
 * Section 12, against @upstash/ratelimit: the same Worker written with the anchor and with sluice
 * (bench/workers/), built by wrangler as a user deploys them, then (1) their sizes and the cost of
 * evaluating each bundle once, (2) the traffic shapes of traffic.ts on one Redis behind one bridge,
 * rounds interleaved, each Worker counted by a tap of its own and by `INFO commandstats`.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { type Cleanup, startRedisBridge } from "../stack.js";
import type { IpSource } from "../stats.js";
import { startTap } from "../tap.js";
import { type BuiltWorker, buildPackage, buildSide, SIDES, type Side } from "./build.js";
import { measureEvaluation } from "./evaluation.js";
import { type AnchorResult, type ShapeResult, sideFigures, type WorkerFigures } from "./figures.js";
import {
  type AnchorStack,
  type RoundCounts,
  runRound,
  type ShapeKey,
  startIsolate,
  type TrafficOptions,
} from "./traffic.js";
import { hit } from "../request.js";

export interface AnchorOptions extends TrafficOptions {
  /** Fresh processes per Worker for the evaluation time. */
  evaluations: number;
}

const SHAPES: Array<{ key: ShapeKey; name: string; label: (o: TrafficOptions) => string }> = [
  {
    key: "sparse",
    name: "sparse",
    label: (o) =>
      `sparse (${o.sparse.isolates} isolates, 1 req/s each for ${o.sparse.seconds} s; ${o.rounds.sparse} rounds per Worker)`,
  },
  {
    key: "hot",
    name: "hot client",
    label: (o) => `hot client (${o.hot.requests} sequential, 1 isolate; ${o.rounds.hot} rounds)`,
  },
  {
    key: "bursty",
    name: "bursty client",
    label: (o) =>
      `bursty client (${o.bursty.bursts} bursts of ${o.bursty.size}, ${o.bursty.pauseMs} ms apart; ${o.rounds.bursty} rounds)`,
  },
];

const ALGORITHM =
  'one token bucket per client IP on both (anchor: Ratelimit.tokenBucket(1e6, "1 s", 1e6); sluice: rate 1e6 per 1s, burst 1e6), so every request is allowed';

export async function measureAnchor(
  cleanup: Cleanup,
  ips: IpSource,
  o: AnchorOptions,
  step: (what: string) => void,
): Promise<AnchorResult> {
  step("12/12 against @upstash/ratelimit: building the sluice package, then both Workers with wrangler --minify");
  await buildPackage(cleanup);
  const built = await Promise.all(SIDES.map((side) => buildSide(side, cleanup)));
  step(`12/12 evaluating each bundle once in ${o.evaluations} fresh Node processes per Worker`);
  const evaluation = await measureEvaluation(built, o.evaluations);
  const stack = await anchorStack(cleanup, o.delayMs);
  await primeScripts(stack, built, ips);
  const shapes: ShapeResult[] = [];
  for (const shape of SHAPES) {
    step(`12/12 ${shape.label(o)}, Redis +${o.delayMs} ms`);
    const rounds = await interleaved(stack, built, shape.key, o, ips);
    shapes.push({
      key: shape.key,
      name: shape.name,
      label: shape.label(o),
      anchor: sideFigures(rounds.anchor),
      sluice: sideFigures(rounds.sluice),
    });
  }
  const workerFigures = (side: Side): WorkerFigures => {
    const { source, raw_kib, gzip_kib, wrangler } = built.find((w) => w.side === side) as BuiltWorker;
    return { source, raw_kib, gzip_kib, wrangler, evaluation: evaluation[side] };
  };
  return {
    anchor_package: `@upstash/ratelimit ${anchorVersion()}`,
    algorithm: ALGORITHM,
    delay_ms: o.delayMs,
    build_command: built[0]?.command ?? "",
    evaluation_method:
      "a fresh Node process per sample evaluates the bundle as a module (node:vm SourceTextModule: parse, compile, link, top level); median",
    options: o,
    workers: { anchor: workerFigures("anchor"), sluice: workerFigures("sluice") },
    shapes,
    problems: [...sizeProblems(built), ...problemsOf(shapes)],
  };
}

/** A Redis and bridge of the section's own (so commandstats count nothing else), a tap per Worker. */
async function anchorStack(cleanup: Cleanup, delayMs: number): Promise<AnchorStack> {
  const rb = await startRedisBridge(cleanup, "anchor");
  rb.bridge.setLatency(delayMs);
  const taps = {
    anchor: await startTap(rb.bridge.url, cleanup, "anchor"),
    sluice: await startTap(rb.bridge.url, cleanup, "sluice"),
  };
  return { ...rb, taps, cleanup };
}

/** One uncounted request per Worker, so that Redis has both scripts cached before any round. */
async function primeScripts(stack: AnchorStack, built: readonly BuiltWorker[], ips: IpSource): Promise<void> {
  for (const b of built) {
    const mf = await startIsolate(b, stack.taps[b.side].url, stack.cleanup);
    const h = await hit(mf, "/prime", ips.take());
    await mf.dispose();
    if (h.status !== 200) throw new Error(`${b.side} Worker answered ${h.status} to its first request`);
  }
}

/** `rounds` rounds per Worker, alternating which goes first, so drift on the machine hits both alike. */
async function interleaved(
  stack: AnchorStack,
  built: readonly BuiltWorker[],
  shape: ShapeKey,
  o: TrafficOptions,
  ips: IpSource,
): Promise<Record<Side, RoundCounts[]>> {
  const out: Record<Side, RoundCounts[]> = { anchor: [], sluice: [] };
  for (let r = 0; r < o.rounds[shape]; r++) {
    const order = r % 2 === 0 ? built : [...built].reverse();
    for (const b of order) out[b.side].push(await runRound(stack, b, shape, o, ips));
  }
  return out;
}

/** The modules measured must be the ones wrangler uploads: the raw sizes agree to wrangler's rounding. */
function sizeProblems(built: readonly BuiltWorker[]): string[] {
  return built
    .filter((b) => Math.abs(b.raw_kib - b.wrangler.raw_kib) > 0.02)
    .map(
      (b) =>
        `anchor section, ${b.side} Worker: modules of ${b.raw_kib} KiB measured, wrangler uploads ${b.wrangler.raw_kib} KiB`,
    );
}

function problemsOf(shapes: readonly ShapeResult[]): string[] {
  const problems: string[] = [];
  for (const s of shapes)
    for (const side of SIDES) {
      const f = s[side];
      if (Object.keys(f.unexpected).length > 0)
        problems.push(`anchor section, ${s.label}, ${side}: answers other than 200: ${JSON.stringify(f.unexpected)}`);
      if (f.stray_requests > 0)
        problems.push(
          `anchor section, ${s.label}, ${side}: the other Worker's tap saw ${f.stray_requests} requests meanwhile`,
        );
    }
  return problems;
}

function anchorVersion(): string {
  const pkg = JSON.parse(readFileSync(resolve("node_modules/@upstash/ratelimit/package.json"), "utf8")) as {
    version?: string;
  };
  return pkg.version ?? "unknown";
}
