import type { Context } from "hono";
import * as z from "zod/mini";
import { CODE_PART } from "../../identity/identify.js";
import { deferred, lazy } from "../../config/lazy.js";
import {
  booleanOrDuration,
  duration,
  flag,
  keyPart,
  name,
  oneOf,
  tierRate,
  toolName,
} from "../../config/primitives.js";
import { banSettings, bannable } from "./ban-schema.js";
import {
  algorithm,
  ALGORITHM_NAMES,
  hasTrait,
  leasableAlgorithms,
  leasableShape,
  MAX_IN_FLIGHT,
  namesWith,
  readersOf,
  type Algorithm,
  type AlgorithmSetting,
  type AlgorithmSettings,
} from "./algorithms/registry.js";
import { compiledFigures, figureProblems } from "./algorithms/figures.js";
import { PRIORITIES, RESERVABLE, type Reserve } from "./decision/priority.js";
import { parseResponseSource } from "./cost/response-figures.js";
import { alignProblem } from "./algorithms/zone-window.js";

/**
 * A limit's `reserve`: fractions of its capacity kept for the priorities above a request's
 * (docs/algorithms.md, Priorities), `critical` and `default` only (nothing ranks below sheddable), each
 * 0 < f < 1, summing to less than 1.
 */
export const reserve = /* @__PURE__ */ lazy(() =>
  z.pipe(
    z.record(z.string(), z.number()),
    z.transform((r: Record<string, number>, ctx): Reserve => {
      const issue = (key: string, message: string) =>
        ctx.issues.push({ code: "custom", path: [key], message, input: r });
      for (const [key, f] of Object.entries(r)) {
        if (key === "sheddable")
          issue(key, "cannot be reserved for: sheddable is the lowest priority, there is nobody to keep room from");
        else if (!(RESERVABLE as readonly string[]).includes(key))
          issue(key, `is not a priority that can be reserved for: use ${RESERVABLE.join(" or ")}`);
        else if (!(f > 0 && f < 1)) issue(key, "must be a fraction of the capacity between 0 and 1 (exclusive)");
      }
      const total = Object.values(r).reduce((sum, f) => sum + f, 0);
      if (!(total < 1))
        ctx.issues.push({
          code: "custom",
          message: `the fractions add up to ${total}: they must total less than 1`,
          input: r,
        });
      return r;
    }),
  ),
);

/** A route's priority from the app's own code (middleware options only): the request's context in, a priority's name out. */
export type PriorityFunction = (c: Context) => string | undefined;

/** A route's `priority`: one of the names, or where a request carries one (a header, a verified JWT claim), or a function. */
export const priority = /* @__PURE__ */ lazy(() =>
  z.union([
    z.enum(PRIORITIES),
    z.custom<PriorityFunction>((v) => typeof v === "function"),
    z
      .string()
      .check(
        z.regex(
          /^(header:[A-Za-z0-9!#$%&'*+.^_`|~-]+|jwt:.+)$/,
          'must be critical, default, sheddable, "header:<name>" or "jwt:<claim>"',
        ),
      ),
  ]),
);

const DEFAULT_MAX_DELAY_MS = 1_000;

/** Whether a limit sets an algorithm-specific setting: leaving its default is not setting it. */
const SETS: Record<AlgorithmSetting, (l: AlgorithmSettings) => boolean> = {
  warmup: (l) => l.warmup !== undefined,
  max_delay: (l) => l.max_delay !== DEFAULT_MAX_DELAY_MS,
  nodelay: (l) => l.nodelay,
  margin: (l) => l.margin !== undefined,
};

/** Settings a limit sets that its algorithm does not read: of each other algorithm's, the first it sets. */
function misplacedSettings(l: AlgorithmSettings & { algorithm: Algorithm }): AlgorithmSetting[] {
  const own = algorithm(l.algorithm).settings;
  const found = new Set<AlgorithmSetting>();
  for (const name of ALGORITHM_NAMES) {
    const first = algorithm(name).settings.find((s) => !own.includes(s) && SETS[s](l));
    if (first) found.add(first);
  }
  return [...found];
}

/**
 * `cost = { response = "header:<name>" | "json:<path>" | "sse:<path>", reserve, max }`: taken at
 * admission, settled to what the origin reports (src/features/rate-limit/cost/response-figures.ts; `trailer:` is
 * refused there by name).
 */
function responseCost() {
  return z.strictObject({
    response: z.string().check(
      z.superRefine((text, ctx) => {
        const source = parseResponseSource(text);
        if (typeof source === "string") ctx.addIssue({ code: "custom", message: source });
      }),
    ),
    reserve: z.int().check(z.positive()),
    max: z.int().check(z.positive(), z.maximum(1_000_000_000)),
  });
}

/** A count of tokens: a whole number from 1 to a billion. */
const tokens = /* @__PURE__ */ lazy(() => z.int().check(z.positive(), z.maximum(1_000_000_000)));

/** What a limit charged from the response may not be. */
function responseCostProblems(l: {
  algorithm: Algorithm;
  warmup?: number;
  scope: string;
  cost: number;
  max_cost?: number;
  responseCost?: { max: number };
}): string[] {
  const problems: string[] = [];
  if (!hasTrait(l.algorithm, "responseCost"))
    problems.push(`from the response applies to ${namesWith("responseCost")} limits only`);
  if (l.warmup !== undefined) problems.push("from the response does not go with warmup");
  if (l.scope === "split") problems.push("from the response does not go with scope = split");
  if (l.max_cost !== undefined) problems.push("from the response takes its bound from `max`, not max_cost");
  if (l.responseCost && l.responseCost.max < l.cost) problems.push("from the response: reserve must not exceed max");
  return problems;
}

/** A limit's key from the app's own code: the request's context in, the identifier (or `undefined`: missing) out. */
export type KeyFunction = (c: Context) => string | undefined;

/**
 * A limit's `key`: the list and the function forms built when the union reaches them (a key part
 * that fails, or a key of another form), never for "ip".
 */
const limitKey = () =>
  z._default(
    z.union([
      keyPart(),
      z.lazy(() => z.array(keyPart()).check(z.minLength(1), z.maxLength(8))),
      z.lazy(() =>
        z.custom<KeyFunction>((v) => typeof v === "function", "must be key parts or a function of the context"),
      ),
    ]),
    "ip",
  );

/** A limit's figures: its name, identity, algorithm, rate and cost. */
function figureFields() {
  return {
    name: name(),
    /** Key parts, or (middleware options only) a function of the request's context giving the identifier. */
    key: limitKey(),
    algorithm: oneOf(ALGORITHM_NAMES, "token_bucket"),
    /** Required but for concurrency, which takes `limit` and a `lease` duration instead (src/features/rate-limit/algorithms/figures.ts). */
    rate: z.optional(tokens()),
    period: z.optional(duration()),
    burst: z.optional(tokens()),
    /** concurrency: requests of a key in flight at once. */
    limit: z.optional(
      deferred(() =>
        z
          .int()
          .check(
            z.positive(),
            z.maximum(MAX_IN_FLIGHT, `must be at most ${MAX_IN_FLIGHT}: the bucket lists every slot in flight`),
          ),
      ),
    ),
    /**
     * Tokens one request takes: a number, "header:<name>" read from the request (bounded by
     * max_cost), or what the origin reports (docs/algorithms.md, Cost from the response).
     */
    cost: z._default(
      deferred(() =>
        z.union([
          z.int().check(z.positive()),
          z.string().check(z.regex(/^header:[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'must be a number or "header:<name>"')),
          responseCost(),
        ]),
      ),
      1,
    ),
    max_cost: z.optional(deferred(() => z.int().check(z.positive()))),
  };
}

/** A limit's other settings: scope, shadow, what a missing identity does, an algorithm's own, tiers, leases, bans, reserve. */
function settingFields() {
  return {
    scope: oneOf(["region", "global", "split"], "region"),
    shadow: flag(),
    /** What to do when the request does not carry the identity: fall back to the IP, refuse (400), or skip the limit. */
    missing: oneOf(["ip", "reject", "skip"], "ip"),
    /** token_bucket: ramp from rate/3 to rate over this long after an idle period. */
    warmup: z.optional(duration()),
    /** leaky_bucket: the longest a request may wait for its slot before it is refused instead. */
    max_delay: z.optional(duration()),
    /** leaky_bucket: let the queued burst through at once (nginx nodelay); slots still refill at the rate. */
    nodelay: z.optional(deferred(z.boolean)),
    /**
     * sliding_log: count over the period plus this much, the spread of the delay between sluice's
     * decision and the origin's arrival, so the origin itself sees at most `rate` in any period.
     */
    margin: z.optional(duration()),
    /** Take the rate from a table keyed by this identity's value, e.g. "jwt:plan". */
    tier: z.optional(keyPart()),
    rates: z.optional(deferred(() => z.record(z.string().check(z.minLength(1), z.maxLength(64)), tierRate()))),
    /**
     * Let isolates hold leases on this limit's buckets (docs/regions-and-leases.md, Leases); default: wherever the limit
     * can be leased. concurrency: how long a slot may be held, a duration.
     */
    lease: z.optional(deferred(booleanOrDuration)),
    /** Put a client this limit keeps refusing on the deny list, for longer each time (docs/operating.md, Bans). */
    ban: z.optional(deferred(banSettings)),
    /** Capacity kept for higher priorities, e.g. `{ critical = 0.2 }` (docs/algorithms.md, Priorities). */
    reserve: z.optional(deferred(reserve)),
    /** On a route with an `mcp` table: the limit applies to calls of these tools only (docs/mcp.md). */
    tools: z.optional(deferred(() => z.array(toolName()).check(z.minLength(1)))),
    /** fixed_window of whole days: windows start at local midnight in this IANA time zone, e.g. "Asia/Shanghai". */
    align: z.optional(z.string()),
  };
}

/** A limit as written, its fields parsed. */
type WrittenLimit = z.output<z.ZodMiniObject<ReturnType<typeof figureFields> & ReturnType<typeof settingFields>>>;

/** A limit as a decision reads it: its figures compiled, its key a list, its cost and lease settled. */
function compiledLimit(l: WrittenLimit) {
  const costHeader = typeof l.cost === "string" ? l.cost.slice(7).toLowerCase() : undefined;
  const fromResponse = typeof l.cost === "object" ? l.cost : undefined;
  const source = fromResponse && parseResponseSource(fromResponse.response);
  const responseCost = fromResponse && typeof source === "object" ? { ...source, max: fromResponse.max } : undefined;
  return {
    ...l,
    ...compiledFigures(l),
    // a key from the app's code is read as the one part "code" (src/identity/identify.ts)
    key: typeof l.key === "function" ? [CODE_PART] : Array.isArray(l.key) ? l.key : [l.key],
    keyOf: typeof l.key === "function" ? l.key : undefined,
    cost: typeof l.cost === "number" ? l.cost : (fromResponse?.reserve ?? 1),
    costHeader,
    responseCost,
    max_delay: l.max_delay ?? DEFAULT_MAX_DELAY_MS,
    nodelay: l.nodelay ?? false,
    lease: typeof l.lease === "boolean" ? l.lease : leasableShape({ ...l, costHeader, responseCost }),
  };
}

type CompiledLimit = ReturnType<typeof compiledLimit>;

/** What a limit's settings may not be together. */
function limitProblems(l: CompiledLimit, issue: (path: string, message: string) => void) {
  const input = l as { burst?: number };
  if (algorithm(l.algorithm).capacity === "rate" && input.burst !== l.rate)
    issue("burst", `does not apply to ${l.algorithm}: the window holds \`rate\``);
  for (const setting of misplacedSettings(l)) issue(setting, `applies to ${readersOf(setting)} only`);
  const maxCost = l.costHeader ? l.max_cost : l.cost;
  if (l.costHeader && l.max_cost === undefined)
    issue("max_cost", 'is required when cost comes from a header ("header:<name>")');
  if (!l.costHeader && l.max_cost !== undefined) issue("max_cost", "applies only when cost comes from a header");
  const capacities = [l.burst, ...Object.values(l.rates ?? {}).map((t) => t.rate)];
  if (maxCost !== undefined && maxCost > Math.min(...capacities))
    issue(
      l.costHeader ? "max_cost" : "cost",
      `cost ${maxCost} exceeds the capacity ${Math.min(...capacities)}: such a request could never pass`,
    );
  if (l.responseCost) responseCostProblems(l).forEach((m) => issue("cost", m));
  if ((l.tier === undefined) !== (l.rates === undefined))
    issue(l.tier === undefined ? "tier" : "rates", "tier and rates go together");
  if (l.lease && !leasableShape(l))
    issue(
      "lease",
      `applies to ${leasableAlgorithms()} limits that are not split, with a fixed cost, no tier and no reserve`,
    );
  const align = l.align === undefined ? undefined : alignmentProblem(l.align, l.algorithm, l.period);
  if (align) issue("align", align);
  const shortest = Math.min(l.period, ...Object.values(l.rates ?? {}).map((t) => t.period));
  if (l.margin !== undefined && l.margin > shortest)
    issue(
      "margin",
      `${l.margin} ms is more than the period (${shortest} ms${shortest < l.period ? ", a tier's" : ""}): the limit would admit less than half its rate`,
    );
  if (l.ban && !bannable(l.key))
    issue(
      "ban",
      "needs a limit keyed on one client part: ip, header:<name>, cookie:<name>, query:<name> or jwt:<claim>",
    );
}

/**
 * A limit's fields checked (its figures first: their problems alone are reported) and compiled:
 * one transform rather than a check on each of the object and the pipe, each of which `.check`
 * would clone (a cold start builds this schema once, and every schema it builds is time).
 */
export const limit = /* @__PURE__ */ lazy(() =>
  z.pipe(
    z.strictObject({ ...figureFields(), ...settingFields() }),
    z.transform((l: WrittenLimit, ctx): CompiledLimit => {
      const problems = figureProblems(l);
      const compiled = problems.length > 0 ? undefined : compiledLimit(l);
      if (compiled) limitProblems(compiled, (path, message) => problems.push([path, message]));
      for (const [path, message] of problems) ctx.issues.push({ code: "custom", path: [path], message, input: l });
      return compiled ?? z.NEVER;
    }),
  ),
);

/** What is wrong with a limit's `align`, if anything: an algorithm whose windows align, a period of whole days, a known zone. */
function alignmentProblem(zone: string, name: Algorithm, periodMs: number): string | undefined {
  if (!hasTrait(name, "aligned")) return `applies to ${namesWith("aligned")} only (not ${name})`;
  return alignProblem(zone, periodMs);
}
