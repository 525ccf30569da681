/**
 * Section 7, the boundary effect, measured: the production `lua/decide.lua` run by the bench's
 * Redis on a simulated clock, exactly as test/integration/decide-lua.test.ts does it (the one
 * `redis.call('TIME')` reads two trailing ARGV instead, and TTLs get a day added so that real
 * expiry cannot interfere while the simulated clock runs). A limit of 100 per second; a client
 * sends requests at fixed simulated times, and every admitted request's time is kept, so the most
 * admitted in any interval is exact.
 */
import { RespError, type RespClient } from "@sluice/dev";
import { loadConfig, type Limit } from "../src/config/index.js";
import type { scriptCall } from "../src/features/rate-limit/decision/decision.js";
import type { LimitInput } from "./config.js";

type Call = typeof scriptCall;

/** The two markers the test-clock substitution relies on (the same as the tests'). */
const CLOCK = "redis.call('TIME')";
const TTL = "'PX', math.max(1, ttl_ms)";

const RATE = 100;
const PERIOD_US = 1_000_000;
/** A whole second of Redis time, so fixed and sliding windows start at T0, T0 + 1 s, ... */
const T0_US = 1_700_000_000 * 1_000_000;
const MS = 1_000;
/** Commands per pipelined write (each EVAL carries the whole script text, ~12 KB). */
const BATCH = 200;

/**
 * decide.lua with a test clock. Throws when either marker does not occur exactly once: the
 * substitution would then silently measure something else (or the real clock).
 */
export function testClockScript(source: string): string {
  const count = (marker: string) => source.split(marker).length - 1;
  for (const [marker, what] of [
    [CLOCK, "the clock read"],
    [TTL, "the TTL argument"],
  ] as const) {
    const n = count(marker);
    if (n !== 1)
      throw new Error(
        `section 7 needs ${what} \`${marker}\` exactly once in lua/decide.lua, found ${n} times: update bench/boundary.ts`,
      );
  }
  return source.replace(CLOCK, "{ ARGV[#ARGV - 1], ARGV[#ARGV] }").replace(TTL, `${TTL} + 86400000`);
}

interface AlgorithmCase {
  key: string;
  label: string;
  limit: LimitInput;
  /** Most that can pass in any interval of one period, by construction of the algorithm. */
  ceiling: number;
  ceilingWhy: string;
}

const ALGORITHMS: AlgorithmCase[] = [
  {
    key: "fixed_window",
    label: "fixed_window",
    limit: { name: "l", algorithm: "fixed_window", rate: RATE, period: "1s" },
    ceiling: 2 * RATE,
    ceilingWhy: "2 × rate (two windows)",
  },
  {
    key: "sliding_window",
    label: "sliding_window",
    limit: { name: "l", algorithm: "sliding_window", rate: RATE, period: "1s" },
    ceiling: 2 * RATE,
    ceilingWhy: "2 × rate (curr ≤ rate, prev ≤ rate)",
  },
  {
    key: "sliding_log",
    label: "sliding_log",
    limit: { name: "l", algorithm: "sliding_log", rate: RATE, period: "1s" },
    ceiling: RATE,
    ceilingWhy: "rate (exact: every admitted request is in the log for one period)",
  },
  {
    key: "token_bucket",
    label: "token_bucket, burst 100",
    limit: { name: "l", algorithm: "token_bucket", rate: RATE, period: "1s", burst: RATE },
    ceiling: 2 * RATE,
    ceilingWhy: "burst + rate",
  },
  {
    key: "leaky_bucket",
    label: "leaky_bucket nodelay, burst 100",
    limit: { name: "l", algorithm: "leaky_bucket", rate: RATE, period: "1s", burst: RATE, nodelay: true },
    ceiling: 2 * RATE + 1,
    ceilingWhy: "burst + 1 + rate",
  },
];

interface Scenario {
  key: string;
  label: string;
  /** Request times in µs after T0 (a window boundary every second), ascending. */
  times: number[];
}

const greedy = (fromMs: number, toMs: number): number[] =>
  Array.from({ length: toMs - fromMs }, (_, i) => (fromMs + i) * MS);

const SCENARIOS: Scenario[] = [
  {
    key: "late_greedy",
    label: "idle until 0.9 s, then 1 request/ms until 3 s",
    times: greedy(900, 3000),
  },
  {
    key: "adversarial",
    label: "100 requests in the last ms of window 0 (0.999 s), then 1 request/ms from 1 s until 3 s",
    times: [...Array.from({ length: RATE }, (_, i) => 999 * MS + i), ...greedy(1000, 3000)],
  },
];

export interface IntervalMax {
  /** Most admitted requests in any half-open interval of this length. */
  admitted: number;
  /** Where the first such interval starts (s after T0). */
  from_s: number;
}

export interface BoundaryRun {
  scenario: string;
  algorithm: string;
  label: string;
  requests: number;
  admitted: number;
  max_1s: IntervalMax;
  max_100ms: IntervalMax;
  /** Admitted in [2 s, 3 s): the steady state of a greedy client, for comparison with the rate. */
  last_second: number;
  ceiling_1s: number;
  ceiling_why: string;
}

export interface BoundaryResult {
  limit: { rate: number; period: string };
  scenarios: Array<{ key: string; label: string; requests: number }>;
  runs: BoundaryRun[];
  /** The decide.lua clock substitution used, for the record. */
  clock: { replaced: string; by: string; ttl_added_ms: number };
  problems: string[];
}

export async function measureBoundary(resp: RespClient, call: Call, source: string): Promise<BoundaryResult> {
  // Encoded once: every EVAL carries the whole text, and RespClient would re-encode a string each time.
  const script = Buffer.from(testClockScript(source), "utf8");
  const runs: BoundaryRun[] = [];
  const problems: string[] = [];
  for (const sc of SCENARIOS) {
    for (const alg of ALGORITHMS) {
      const admittedAt = await admissions(resp, call, script, sc, alg);
      const run: BoundaryRun = {
        scenario: sc.key,
        algorithm: alg.key,
        label: alg.label,
        requests: sc.times.length,
        admitted: admittedAt.length,
        max_1s: maxIn(admittedAt, PERIOD_US),
        max_100ms: maxIn(admittedAt, 100 * MS),
        last_second: admittedAt.filter((t) => t >= 2 * PERIOD_US && t < 3 * PERIOD_US).length,
        ceiling_1s: alg.ceiling,
        ceiling_why: alg.ceilingWhy,
      };
      if (run.max_1s.admitted > alg.ceiling) {
        problems.push(
          `boundary ${sc.key} ${alg.key}: ${run.max_1s.admitted} admitted in one second, above the algorithm's ceiling ${alg.ceiling} (${alg.ceilingWhy})`,
        );
      }
      runs.push(run);
    }
  }
  return {
    limit: { rate: RATE, period: "1s" },
    scenarios: SCENARIOS.map((s) => ({ key: s.key, label: s.label, requests: s.times.length })),
    runs,
    clock: { replaced: CLOCK, by: "{ ARGV[#ARGV - 1], ARGV[#ARGV] }", ttl_added_ms: 86_400_000 },
    problems,
  };
}

/** Sends a scenario's requests to decide.lua on the test clock, in batches; the times it admitted. */
async function admissions(
  resp: RespClient,
  call: Call,
  script: Buffer,
  sc: Scenario,
  alg: AlgorithmCase,
): Promise<number[]> {
  const limit = limitOf(alg.limit);
  const key = `bench:boundary:${sc.key}:${alg.key}`;
  const commands = sc.times.map((t, i) => {
    // a sliding log names each request's entries (a fresh id per request in the Worker)
    const { keys, args } = call([{ limit, key, entry: `r${i}` }], "take");
    const now = T0_US + t;
    return [
      "EVAL",
      script,
      String(keys.length),
      ...keys,
      ...args,
      String(Math.floor(now / 1e6)),
      String(now % 1e6),
    ] as const;
  });
  const admittedAt: number[] = [];
  for (let i = 0; i < commands.length; i += BATCH) {
    const replies = await resp.sendMany(commands.slice(i, i + BATCH));
    replies.forEach((reply, j) => {
      if (!Array.isArray(reply) || reply.length !== 2 + 8 || typeof reply[0] !== "number") {
        throw new Error(
          `section 7 ${alg.key}: unexpected reply from decide.lua: ${reply instanceof RespError ? reply.message : JSON.stringify(reply)}`,
        );
      }
      if (reply[0] === 1) admittedAt.push(sc.times[i + j] as number);
    });
  }
  return admittedAt;
}

/** Most of the ascending `times` in any half-open interval [s, s + width); s at an admitted time. */
export function maxIn(times: readonly number[], width: number): IntervalMax {
  let best = 0;
  let from = 0;
  let end = 0;
  for (let start = 0; start < times.length; start++) {
    const s = times[start] as number;
    while (end < times.length && (times[end] as number) < s + width) end++;
    if (end - start > best) {
      best = end - start;
      from = s;
    }
  }
  return { admitted: best, from_s: from / 1e6 };
}

function limitOf(input: AlgorithmCase["limit"]): Limit {
  const r = loadConfig({
    ORIGIN_URL: "http://127.0.0.1",
    SLUICE: { routes: [{ name: "boundary", match: "/", limits: [input] }] },
  });
  if (!r.ok) throw new Error(`section 7 limit rejected by sluice: ${r.error.message}`);
  const limit = r.config.routes[0]?.limits[0];
  if (!limit) throw new Error("section 7: no limit compiled");
  return limit;
}
