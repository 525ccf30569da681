import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Limit } from "../../../config/index.js";
import { enLocale } from "../../../config/messages.js";
import { sluiceSchema } from "../../../config/schema.js";
import { FixedWindow, LeakyBucket, SlidingWindow, TokenBucket } from "./algorithms.js";
import type { Bucket } from "../decision/decision.js";
import { leasable, leaseTerms } from "../isolate/lease-broker.js";
import { algorithm, ALGORITHM_NAMES, leasableShape, refusalCacheable } from "./registry.js";
import { scriptCall } from "../decision/script-call.js";
import {
  ALGORITHM_COLUMNS,
  DECIDE_LIMIT_COLUMNS,
  type AlgorithmColumn,
  type DecideLimitColumn,
} from "../decision/limit-columns.js";
import { allowance } from "../headers.js";
import { logEntryId } from "../decision/buckets.js";
import type { Store } from "../../../store/redis.js";

/*
 * The registry against what each place decided on its own before it existed (the oracles below
 * are those rules as they were written), and against decide.lua's own numbering.
 */

const LUA = readFileSync("lua/decide.lua", "utf8");

const OLD_CODES = { token_bucket: 1, leaky_bucket: 2, fixed_window: 3, sliding_window: 4 } as const;
/** What came after the registry: concurrency (docs/algorithms.md, In-flight caps), the exact sliding log. */
const NEW_CODES = { concurrency: 5, sliding_log: 6 } as const;
type OldAlgorithm = keyof typeof OLD_CODES;
/** The plainest valid limit of an algorithm. */
const plain = (algorithm: string) =>
  algorithm === "concurrency" ? { limit: 1, lease: "1s", algorithm } : { rate: 1, period: "1s", algorithm };
type OldLimit = Pick<
  Limit,
  "algorithm" | "warmup" | "scope" | "costHeader" | "tier" | "shadow" | "max_delay" | "nodelay"
>;
const oldLeasableShape = (l: {
  algorithm: string;
  warmup?: number;
  scope: string;
  costHeader?: string;
  tier?: string;
}) =>
  (l.algorithm === "fixed_window" || (l.algorithm === "token_bucket" && l.warmup === undefined)) &&
  l.scope !== "split" &&
  l.costHeader === undefined &&
  l.tier === undefined;
const oldCacheable = (l: OldLimit) =>
  !l.shadow && l.scope !== "split" && l.warmup === undefined && l.costHeader === undefined && l.tier === undefined;
const oldScriptArgs = (l: OldLimit) =>
  l.algorithm === "token_bucket"
    ? [(l.warmup ?? 0) * 1000, 0]
    : l.algorithm === "leaky_bucket"
      ? [l.max_delay * 1000, l.nodelay ? 1 : 0]
      : [0, 0];
/** The columns the old p1, p2 went to once each column had one meaning (a value without one was 0). */
const OLD_P_COLUMNS: Record<OldAlgorithm, AlgorithmColumn[]> = {
  token_bucket: ["warmup_us"],
  leaky_bucket: ["max_delay_us", "nodelay"],
  fixed_window: [],
  sliding_window: [],
};
/** A limit's value of a column in decide.lua's ARGV (without mode, n and override_idx). */
const columnOf = (args: string[], name: DecideLimitColumn) => args[DECIDE_LIMIT_COLUMNS.indexOf(name)];
const OLD_MODELS = {
  token_bucket: TokenBucket,
  leaky_bucket: LeakyBucket,
  fixed_window: FixedWindow,
  sliding_window: SlidingWindow,
} as const;
const OLD_LEASE_MESSAGE =
  "applies to token_bucket (without warmup) and fixed_window limits that are not split, with a fixed cost, no tier and no reserve";

interface RawLimit {
  algorithm: keyof typeof OLD_CODES;
  rate: number;
  burst?: number;
  warmup?: string;
  max_delay?: string;
  nodelay?: boolean;
  scope: "region" | "global" | "split";
  shadow: boolean;
  headerCost: boolean;
  tiered: boolean;
  lease?: boolean;
}

/** The issues the schema raised for one limit, in the order it did before the registry. */
function oldIssues(r: RawLimit): Array<[string, string]> {
  const issues: Array<[string, string]> = [];
  const burst = r.burst ?? r.rate;
  const maxDelay = r.max_delay === "2s" ? 2_000 : 1_000;
  const shape = {
    ...r,
    warmup: r.warmup === undefined ? undefined : 3_000,
    costHeader: r.headerCost ? "x-cost" : undefined,
    tier: r.tiered ? "header:x-plan" : undefined,
  };
  if ((r.algorithm === "fixed_window" || r.algorithm === "sliding_window") && burst !== r.rate)
    issues.push(["burst", `does not apply to ${r.algorithm}: the window holds \`rate\``]);
  if (r.warmup !== undefined && r.algorithm !== "token_bucket") issues.push(["warmup", "applies to token_bucket only"]);
  if ((r.nodelay || maxDelay !== 1_000) && r.algorithm !== "leaky_bucket")
    issues.push([r.nodelay ? "nodelay" : "max_delay", "applies to leaky_bucket only"]);
  if ((r.lease ?? oldLeasableShape(shape)) && !oldLeasableShape(shape)) issues.push(["lease", OLD_LEASE_MESSAGE]);
  return issues;
}

function limitInput(r: RawLimit): Record<string, unknown> {
  const { headerCost, tiered, ...rest } = r;
  const input: Record<string, unknown> = { name: "l", ...rest };
  if (headerCost) Object.assign(input, { cost: "header:x-cost", max_cost: 1 });
  if (tiered) Object.assign(input, { tier: "header:x-plan", rates: { free: "5/1s" } });
  for (const k of Object.keys(input)) if (input[k] === undefined) delete input[k];
  return input;
}

const ALGORITHM_LIST = Object.keys(OLD_CODES) as Array<keyof typeof OLD_CODES>;
// settings left out half the time, so that valid limits of every algorithm come up often
const maybe = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined, freq: 2 });
const rarely = fc.constantFrom(false, false, false, true);
const rawLimit: fc.Arbitrary<RawLimit> = fc.record(
  {
    algorithm: fc.constantFrom(...ALGORITHM_LIST),
    rate: fc.integer({ min: 2, max: 20 }),
    burst: maybe(fc.integer({ min: 1, max: 20 })),
    warmup: maybe(fc.constant("3s")),
    max_delay: maybe(fc.constantFrom("1s", "2s")),
    nodelay: maybe(fc.boolean()),
    scope: fc.constantFrom("region" as const, "global" as const, "split" as const),
    shadow: rarely,
    headerCost: rarely,
    tiered: rarely,
    lease: maybe(fc.boolean()),
  },
  { requiredKeys: ["algorithm", "rate", "scope", "shadow", "headerCost", "tiered"] },
);
/** The plainest limit of each algorithm, and its usual variants, always tried. */
const EXAMPLES: RawLimit[] = ALGORITHM_LIST.flatMap((algorithm) => [
  { algorithm, rate: 10, scope: "region", shadow: false, headerCost: false, tiered: false },
  { algorithm, rate: 10, scope: "global", shadow: true, headerCost: false, tiered: false },
  { algorithm, rate: 10, scope: "region", shadow: false, headerCost: true, tiered: false },
  { algorithm, rate: 10, scope: "split", shadow: false, headerCost: false, tiered: true },
]);

const parse = (limit: Record<string, unknown>) =>
  // with the messages the configuration is loaded with (zod/mini has none of its own)
  sluiceSchema().safeParse({ routes: [{ name: "r", match: "/a", limits: [limit] }] }, { error: enLocale.localeError });

describe("the algorithm registry", () => {
  it("has an entry for every algorithm of the schema, and the schema knows every entry", () => {
    const r = parse({ name: "l", ...plain("no_such_algorithm") });
    expect(r.success).toBe(false);
    const message = r.error?.issues[0]?.message ?? "";
    const offered = [...message.matchAll(/"([a-z_]+)"/g)].map((m) => m[1]);
    expect(offered.sort()).toEqual([...ALGORITHM_NAMES].sort());
    for (const name of ALGORITHM_NAMES) expect(parse({ name: "l", ...plain(name) }).success, name).toBe(true);
  });

  it("numbers the algorithms as decide.lua documents them, one number each, in the order of its table", () => {
    const header = LUA.slice(LUA.indexOf("Algorithms (ARGV algo):"), LUA.indexOf("\nLeases ("));
    const documented = Object.fromEntries(
      [...header.matchAll(/^ {2}(\d+) ([a-z_]+) /gm)].map((m) => [m[2], Number(m[1])]),
    );
    const codes = Object.fromEntries(ALGORITHM_NAMES.map((n) => [n, algorithm(n).code]));
    expect(codes).toEqual(documented);
    expect(codes).toEqual({ ...OLD_CODES, ...NEW_CODES });
    expect(new Set(Object.values(codes)).size).toBe(ALGORITHM_NAMES.length);
    // the script picks an algorithm by its index in this table
    const table = /local algorithms = \{([^}]*)\}/.exec(LUA)?.[1]?.split(",") ?? [];
    expect(table.length).toBe(ALGORITHM_NAMES.length);
    expect([...Object.values(codes)].sort()).toEqual(ALGORITHM_NAMES.map((_, i) => i + 1));
  });

  it("validates, defaults, sends, caches, leases and models every limit as before", () => {
    fc.assert(
      fc.property(rawLimit, (raw) => {
        const r = parse({ ...limitInput(raw), period: "1s" });
        const issues = r.success ? [] : r.error.issues.map((i) => [i.path.slice(4).join("."), i.message]);
        expect(issues, JSON.stringify(raw)).toEqual(oldIssues(raw));
        if (!r.success) return;
        const l = r.data.routes[0]?.limits[0] as Limit & { algorithm: OldAlgorithm };
        expect(l.lease).toBe(raw.lease ?? oldLeasableShape(l));
        expect(leasableShape(l)).toBe(oldLeasableShape(l));
        expect(leasable(l)).toBe(l.lease && !l.shadow && oldLeasableShape(l));
        expect(refusalCacheable(l)).toBe(oldCacheable(l));

        const bucket = { limit: l, key: "p:r:l:h", store: { id: "s" } as Store } satisfies Bucket;
        const terms = leaseTerms(bucket);
        if (leasable(l))
          expect(terms).toEqual({
            id: "s\u0000p:r:l:h",
            cost: l.cost,
            capacity: l.algorithm === "token_bucket" ? l.burst : l.rate,
            holdsLeases: l.algorithm === "token_bucket",
          });
        else expect(terms).toBeUndefined();

        // ARGV of the limit: algo, and what p1, p2 were in the columns named for them
        const args = scriptCall([bucket], "take").args.slice(3);
        const old = oldScriptArgs(l);
        const moved = OLD_P_COLUMNS[l.algorithm];
        expect([columnOf(args, "algo"), ...moved.map((c) => columnOf(args, c))].map(Number)).toEqual([
          OLD_CODES[l.algorithm],
          ...old.slice(0, moved.length),
        ]);
        expect(old.slice(moved.length).every((v) => v === 0)).toBe(true);
        for (const c of Object.keys(ALGORITHM_COLUMNS) as AlgorithmColumn[])
          if (!moved.includes(c)) expect(columnOf(args, c), c).toBe(String(ALGORITHM_COLUMNS[c]));

        const model = algorithm(l.algorithm).model({
          rate: l.rate,
          periodUs: l.period * 1000,
          burst: l.burst,
          maxDelayUs: l.max_delay * 1000,
          nodelay: l.nodelay,
        });
        expect(model).toBeInstanceOf(OLD_MODELS[l.algorithm]);
      }),
      { numRuns: 2_000, examples: EXAMPLES.map((e) => [e]) },
    );
  });
});

describe("the sliding log's entry", () => {
  const log = () => {
    const r = parse({ name: "l", algorithm: "sliding_log", rate: 10, period: "1s" });
    if (!r.success) throw new Error(JSON.stringify(r.error.issues));
    return r.data.routes[0]?.limits[0] as Limit;
  };

  it("holds `rate` like a window, is never leased, and its refusals hold until their retry-after", () => {
    const l = log();
    expect([l.burst, l.lease, algorithm(l.algorithm).capacity]).toEqual([10, false, "rate"]);
    expect(leasableShape(l)).toBe(false);
    // an entry leaves the period at the time the refusal named, not sooner
    expect(refusalCacheable(l)).toBe(true);
    expect(refusalCacheable({ ...l, costHeader: "x-cost" })).toBe(false);
    const leased = parse({ name: "l", algorithm: "sliding_log", rate: 10, period: "1s", lease: true });
    expect(leased.success).toBe(false);
    expect(parse({ name: "l", algorithm: "sliding_log", rate: 10, period: "1s", burst: 20 }).success).toBe(false);
  });

  it("sends the request's entry id as entry_id, the id a refund removes", () => {
    const bucket = { limit: log(), key: "p:r:l:h", entry: "AbC-_9" };
    for (const mode of ["take", "refund", "peek"] as const) {
      const args = scriptCall([bucket], mode).args.slice(3);
      expect((["algo", "entry_id", "margin_us"] as const).map((c) => columnOf(args, c))).toEqual(["6", "AbC-_9", "0"]);
    }
    expect(columnOf(scriptCall([{ limit: log(), key: "p:r:l:h" }], "peek").args.slice(3), "entry_id")).toBe("");
  });

  it("takes a margin (sent as margin_us), refused on other algorithms and above the period, with the field named", () => {
    const r = parse({ name: "l", algorithm: "sliding_log", rate: 10, period: "1s", margin: "50ms" });
    if (!r.success) throw new Error(JSON.stringify(r.error.issues));
    const l = r.data.routes[0]?.limits[0] as Limit;
    expect(l.margin).toBe(50);
    // a refused client is told the margin is part of what it is limited over
    expect(allowance(l)).toBe("allows 10 per 1000 ms + a 50 ms margin (burst 10)");
    expect(columnOf(scriptCall([{ limit: l, key: "p:r:l:h", entry: "e" }], "take").args.slice(3), "margin_us")).toBe(
      "50000",
    );
    const misplaced = parse({ name: "l", algorithm: "token_bucket", rate: 10, period: "1s", margin: "50ms" });
    expect(misplaced.success).toBe(false);
    expect(JSON.stringify(misplaced.error?.issues)).toMatch(/margin.*applies to sliding_log only/);
    const tooLong = parse({ name: "l", algorithm: "sliding_log", rate: 10, period: "1s", margin: "2s" });
    expect(tooLong.success).toBe(false);
    expect(JSON.stringify(tooLong.error?.issues)).toMatch(/margin.*more than the period/);
    // a tier's shorter period counts too
    const tiers = { tier: "header:x-plan", rates: { fast: "10/100ms" } };
    const tierTooShort = parse({
      name: "l",
      algorithm: "sliding_log",
      rate: 10,
      period: "1s",
      margin: "500ms",
      ...tiers,
    });
    expect(JSON.stringify(tierTooShort.error?.issues)).toMatch(/margin.*more than the period \(100 ms, a tier's\)/);
  });

  it("is 16 characters decide.lua accepts (it rides on every member), fresh each time", () => {
    const ids = Array.from({ length: 200 }, logEntryId);
    for (const id of ids) expect(id).toMatch(/^[A-Za-z0-9_-]{16}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
