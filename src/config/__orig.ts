import { z } from "zod";
import { parseDuration } from "./duration.js";
import {
  algorithm,
  ALGORITHM_NAMES,
  leasableAlgorithms,
  leasableShape,
  MAX_IN_FLIGHT,
  readersOf,
  type Algorithm,
  type AlgorithmSetting,
  type AlgorithmSettings,
} from "../features/rate-limit/algorithms/registry.js";
import { compiledFigures, figureProblems } from "../features/rate-limit/algorithms/figures.js";
import { PRIORITIES, RESERVABLE, type Reserve } from "../features/rate-limit/decision/priority.js";
import { parseResponseSource } from "../features/rate-limit/cost/response-figures.js";
import { DEFAULT_PROBLEM_BASE } from "../problem.js";
import { isJsonPointer } from "../features/idempotency/json-pointer.js";
import { AUTO_PRINCIPAL } from "../keys/principal.js";

/** Names end up inside Redis key names and headers: keep them to a safe alphabet. */
const name = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/, "must be 1-63 characters of letters, digits, '_', '.', '-'");

const duration = z.string().transform((text, ctx) => {
  const ms = parseDuration(text);
  if (ms === undefined) {
    ctx.addIssue({ code: "custom", message: `"${text}" is not a duration like "500ms", "1s", "1m", "1h" or "1d"` });
    return z.NEVER;
  }
  return ms;
});

/** `true`, `false` or a duration (ms): a limit's `lease` (docs/regions-and-leases.md, Leases; docs/algorithms.md, In-flight caps). */
const booleanOrDuration = z.union([z.boolean(), z.string()]).transform((v, ctx) => {
  if (typeof v === "boolean") return v;
  const ms = duration.safeParse(v);
  if (!ms.success) for (const i of ms.error.issues) ctx.addIssue({ code: "custom", message: i.message });
  return ms.success ? ms.data : z.NEVER;
});

/** One part of an identity: where the identifier of a bucket comes from. */
const keyPart = z.string().superRefine((part, ctx) => {
  if (part === "ip" || part === "global" || part === "path") return;
  const m = /^(header|query|cookie|jwt):(.+)$/.exec(part);
  if (!m) {
    ctx.addIssue({
      code: "custom",
      message: `"${part}" is not a key: use ip, global, path, header:<name>, query:<name>, cookie:<name> or jwt:<claim>`,
    });
    return;
  }
  if (m[1] === "header" && !/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(m[2] ?? "")) {
    ctx.addIssue({ code: "custom", message: `"${part}": not a valid header name` });
  }
});

/**
 * A limit's `reserve`: fractions of its capacity kept for the priorities above a request's
 * (docs/algorithms.md, Priorities), `critical` and `default` only (nothing ranks below sheddable), each
 * 0 < f < 1, summing to less than 1.
 */
const reserve = z.record(z.string(), z.number()).transform((r, ctx): Reserve => {
  const issue = (key: string, message: string) => ctx.addIssue({ code: "custom", path: [key], message });
  for (const [key, f] of Object.entries(r)) {
    if (key === "sheddable")
      issue(key, "cannot be reserved for: sheddable is the lowest priority, there is nobody to keep room from");
    else if (!(RESERVABLE as readonly string[]).includes(key))
      issue(key, `is not a priority that can be reserved for: use ${RESERVABLE.join(" or ")}`);
    else if (!(f > 0 && f < 1)) issue(key, "must be a fraction of the capacity between 0 and 1 (exclusive)");
  }
  const total = Object.values(r).reduce((sum, f) => sum + f, 0);
  if (!(total < 1))
    ctx.addIssue({ code: "custom", message: `the fractions add up to ${total}: they must total less than 1` });
  return r;
});

/** A route's `priority`: one of the names, or where a request carries one (a header, a verified JWT claim). */
const priority = z.union([
  z.enum(PRIORITIES),
  z
    .string()
    .regex(
      /^(header:[A-Za-z0-9!#$%&'*+.^_`|~-]+|jwt:.+)$/,
      'must be critical, default, sheddable, "header:<name>" or "jwt:<claim>"',
    ),
]);

/** A tier's rate, written "600/1m": that many per that duration (the tier's burst is its rate). */
const tierRate = z.string().transform((text, ctx) => {
  const m = /^(\d{1,9})\/(.+)$/.exec(text.trim());
  const period = m ? parseDuration(m[2] as string) : undefined;
  if (!m || period === undefined || Number(m[1]) < 1) {
    ctx.addIssue({ code: "custom", message: `"${text}" is not a rate like "60/1m"` });
    return z.NEVER;
  }
  return { rate: Number(m[1]), period };
});

const DEFAULT_MAX_DELAY_MS = 1_000;

/** Whether a limit sets an algorithm-specific setting: leaving its default is not setting it. */
const SETS: Record<AlgorithmSetting, (l: AlgorithmSettings) => boolean> = {
  warmup: (l) => l.warmup !== undefined,
  max_delay: (l) => l.max_delay !== DEFAULT_MAX_DELAY_MS,
  nodelay: (l) => l.nodelay,
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

/** The longest a `ban` counts refusals over, and the longest one ban lasts. */
const MAX_BAN_WITHIN_MS = 86_400_000;
const MAX_BAN_MS = 365 * 86_400_000;

/**
 * Escalating bans (docs/operating.md, Bans): a client this limit refuses `after` times within `within` goes
 * on the deny list for the first of `for`, each repeat ban for the next (the last repeats), so a
 * ban never gets shorter.
 */
const banSettings = z
  .object({
    after: z.number().int().min(1).max(1_000_000),
    within: duration.refine((ms) => ms <= MAX_BAN_WITHIN_MS, "must be at most 1d"),
    for: z
      .array(duration.refine((ms) => ms <= MAX_BAN_MS, "must be at most 365d"))
      .min(1)
      .max(16),
  })
  .strict()
  .superRefine((b, ctx) => {
    b.for.forEach((ms, i) => {
      if (i > 0 && ms < (b.for[i - 1] as number))
        ctx.addIssue({ code: "custom", path: ["for", i], message: "must be at least the duration before it" });
    });
  });

/** The key parts a ban can name as a deny-list entry: one per client, never everybody or a path. */
const bannable = (key: string[]) => key.length === 1 && key[0] !== "global" && key[0] !== "path";

/**
 * `cost = { response = "header:<name>" | "json:<path>" | "sse:<path>", reserve, max }`: taken at
 * admission, settled to what the origin reports (src/features/rate-limit/cost/response-figures.ts; `trailer:` is
 * refused there by name).
 */
const responseCost = z
  .object({
    response: z.string().superRefine((text, ctx) => {
      const source = parseResponseSource(text);
      if (typeof source === "string") ctx.addIssue({ code: "custom", message: source });
    }),
    reserve: z.number().int().positive(),
    max: z.number().int().positive().max(1_000_000_000),
  })
  .strict();

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
  if (l.algorithm !== "token_bucket") problems.push("from the response applies to token_bucket limits only");
  if (l.warmup !== undefined) problems.push("from the response does not go with warmup");
  if (l.scope === "split") problems.push("from the response does not go with scope = split");
  if (l.max_cost !== undefined) problems.push("from the response takes its bound from `max`, not max_cost");
  if (l.responseCost && l.responseCost.max < l.cost) problems.push("from the response: reserve must not exceed max");
  return problems;
}

const limit = z
  .object({
    name,
    key: z.union([keyPart, z.array(keyPart).min(1).max(8)]).default("ip"),
    algorithm: z.enum(ALGORITHM_NAMES).default("token_bucket"),
    /** Required but for concurrency, which takes `limit` and a `lease` duration instead (src/features/rate-limit/algorithms/figures.ts). */
    rate: z.number().int().positive().max(1_000_000_000).optional(),
    period: duration.optional(),
    burst: z.number().int().positive().max(1_000_000_000).optional(),
    /** concurrency: requests of a key in flight at once. */
    limit: z
      .number()
      .int()
      .positive()
      .max(MAX_IN_FLIGHT, `must be at most ${MAX_IN_FLIGHT}: the bucket lists every slot in flight`)
      .optional(),
    /**
     * Tokens one request takes: a number, "header:<name>" read from the request (bounded by
     * max_cost), or what the origin reports (docs/algorithms.md, Cost from the response).
     */
    cost: z
      .union([
        z.number().int().positive(),
        z.string().regex(/^header:[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'must be a number or "header:<name>"'),
        responseCost,
      ])
      .default(1),
    max_cost: z.number().int().positive().optional(),
    scope: z.enum(["region", "global", "split"]).default("region"),
    shadow: z.boolean().default(false),
    /** What to do when the request does not carry the identity: fall back to the IP, refuse (400), or skip the limit. */
    missing: z.enum(["ip", "reject", "skip"]).default("ip"),
    /** token_bucket: ramp from rate/3 to rate over this long after an idle period. */
    warmup: duration.optional(),
    /** leaky_bucket: the longest a request may wait for its slot before it is refused instead. */
    max_delay: duration.optional(),
    /** leaky_bucket: let the queued burst through at once (nginx nodelay); slots still refill at the rate. */
    nodelay: z.boolean().optional(),
    /** Take the rate from a table keyed by this identity's value, e.g. "jwt:plan". */
    tier: keyPart.optional(),
    rates: z.record(z.string().min(1).max(64), tierRate).optional(),
    /**
     * Let isolates hold leases on this limit's buckets (docs/regions-and-leases.md, Leases); default: wherever the limit
     * can be leased. concurrency: how long a slot may be held, a duration.
     */
    lease: booleanOrDuration.optional(),
    /** Put a client this limit keeps refusing on the deny list, for longer each time (docs/operating.md, Bans). */
    ban: banSettings.optional(),
    /** Capacity kept for higher priorities, e.g. `{ critical = 0.2 }` (docs/algorithms.md, Priorities). */
    reserve: reserve.optional(),
  })
  .strict()
  .superRefine((l, ctx) =>
    figureProblems(l).forEach(([path, message]) => ctx.addIssue({ code: "custom", path: [path], message })),
  )
  .transform((l) => {
    const costHeader = typeof l.cost === "string" ? l.cost.slice(7).toLowerCase() : undefined;
    const fromResponse = typeof l.cost === "object" ? l.cost : undefined;
    const source = fromResponse && parseResponseSource(fromResponse.response);
    const responseCost = fromResponse && typeof source === "object" ? { ...source, max: fromResponse.max } : undefined;
    return {
      ...l,
      ...compiledFigures(l),
      key: Array.isArray(l.key) ? l.key : [l.key],
      cost: typeof l.cost === "number" ? l.cost : (fromResponse?.reserve ?? 1),
      costHeader,
      responseCost,
      max_delay: l.max_delay ?? DEFAULT_MAX_DELAY_MS,
      nodelay: l.nodelay ?? false,
      lease: typeof l.lease === "boolean" ? l.lease : leasableShape({ ...l, costHeader, responseCost }),
    };
  })
  .superRefine((l, ctx) => {
    const issue = (path: string, message: string) => ctx.addIssue({ code: "custom", path: [path], message });
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
    if (l.ban && !bannable(l.key))
      issue(
        "ban",
        "needs a limit keyed on one client part: ip, header:<name>, cookie:<name>, query:<name> or jwt:<claim>",
      );
  });

const method = z
  .string()
  .regex(/^[A-Za-z]+$/, "must be an HTTP method")
  .transform((m) => m.toUpperCase());

/** What a fallback route answers with when it is shed and no cached copy exists ("sold out"). */
const staticFallback = z
  .object({
    status: z.number().int().min(200).max(599).default(200),
    content_type: z.string().min(1).max(200).default("text/plain; charset=utf-8"),
    body: z.string().max(64 * 1024),
  })
  .strict();

const queueSettings = z
  .object({
    /** Larger request bodies are refused with 413 rather than queued. */
    max_body: z
      .number()
      .int()
      .min(0)
      .max(100 * 1024)
      .default(64 * 1024),
    /** Request headers kept with the job (those a limit keys on are always kept). */
    headers: z
      .array(
        z
          .string()
          .regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, "must be a header name")
          .transform((h) => h.toLowerCase()),
      )
      .default(["content-type"]),
    /** Deliveries that fail at the origin (5xx, network) before the job goes to the dead-letter queue. */
    max_retries: z.number().int().min(0).max(100).default(3),
    /** How long a job's status can be read. */
    status_ttl: duration.default(86_400_000),
  })
  .strict();

const breakerSettings = z
  .object({
    window: duration.default(10_000),
    min_requests: z.number().int().min(1).default(20),
    /** Opens when at least this share of the window's requests failed (5xx, timeout, network). */
    error_ratio: z.number().gt(0).max(1).default(0.5),
    /** Opens too when the window's median origin latency passes this (ms). */
    latency_ms: z.number().int().positive().optional(),
    cooldown: duration.default(10_000),
    /** Requests let through when half-open; all must succeed to close. */
    probes: z.number().int().min(1).max(100).default(3),
    /** Share the open state through Redis so every isolate of the region agrees (within a second). */
    shared: z.boolean().default(false),
    /**
     * The most of the window one client (IP) may account for, as a share of min_requests: its
     * events beyond max(1, ceil(min_requests × client_share)), oldest first, do not count, so one
     * client cannot open the route's breaker for everybody. 1: no cap.
     */
    client_share: z.number().gt(0).max(1).default(0.25),
  })
  .strict();

/**
 * Whose idempotency keys or session locks: `auto` (the verified JWT's sub, else a hash of the
 * Authorization header, else the IP; src/keys/principal.ts), or an identity in the key syntax of
 * limits. `auto` stands alone: combined with other parts it would not say which credential it is.
 */
const principal = z
  .union([z.string(), z.array(z.string()).min(1).max(4)])
  .default(AUTO_PRINCIPAL)
  .superRefine((p, ctx) => {
    if (p === AUTO_PRINCIPAL) return;
    const parts = Array.isArray(p) ? p : [p];
    parts.forEach((part, i) => {
      const checked = keyPart.safeParse(part);
      const at = Array.isArray(p) ? [i] : [];
      if (part === AUTO_PRINCIPAL)
        ctx.addIssue({
          code: "custom",
          path: at,
          message: '"auto" stands alone: it cannot be combined with other parts',
        });
      else if (!checked.success)
        for (const issue of checked.error.issues)
          ctx.addIssue({ code: "custom", path: at, message: `${issue.message}, or "auto"` });
    });
  });

/** `derive = { fields, window }`: the key is these JSON pointers' values in the body, one per window (src/features/idempotency/derive.ts). */
const deriveFields = z
  .object({
    fields: z
      .array(
        z
          .string()
          .max(256)
          .refine(
            isJsonPointer,
            'must be a JSON pointer into the body such as "/user_id" (RFC 6901: "~0" is "~", "~1" is "/")',
          ),
      )
      .min(1)
      .max(16),
    /** Requests that agree on the fields within this long of the first's answer are one key. */
    window: duration,
  })
  .strict();

/**
 * `derive`: `true`, `false` or `{ fields, window }`. The table is checked on its own, so that
 * its errors name the field (`derive.window`) instead of a union's "invalid input".
 */
const derive = z
  .union([z.boolean(), z.looseObject({})], { error: 'must be true, false or { fields = ["/pointer"], window = "5m" }' })
  .transform((v, ctx) => {
    if (typeof v === "boolean") return v;
    const table = deriveFields.safeParse(v);
    if (table.success) return table.data;
    for (const i of table.error.issues) ctx.addIssue({ code: "custom", path: i.path, message: i.message });
    return z.NEVER;
  }) as unknown as z.ZodType<boolean | z.output<typeof deriveFields>, boolean | z.input<typeof deriveFields>>;

const idempotencySettings = z
  .object({
    /** Whose keys these are: `auto` (the caller's credential), or an identity (the key syntax of limits). Two principals never collide. */
    principal,
    /** A request without Idempotency-Key is a 400 problem. */
    required: z.boolean().default(false),
    /**
     * `true`: without the header, derive the key from method, route, principal and the canonical
     * JSON body. `{ fields, window }`: the key is always the named body fields', whatever header comes.
     */
    derive: derive.default(false),
    /** Top-level JSON body fields left out of the canonical body (timestamps, nonces). */
    ignore: z.array(z.string().min(1).max(128)).default([]),
    /**
     * How long a claim holds unrenewed before another request may take it over. A live request
     * renews its claim until it is settled, so this bounds how long a holder that died blocks its
     * key, not the origin's run: shorter than the route's origin_timeout is fine.
     */
    lease: duration.default(30_000),
    /** How long a completed answer is replayed (default a day; with `derive.fields`, the window). */
    ttl: duration.optional(),
    /** How often one principal may be answered with replays ("60/1m": 60 a minute, 60 at once); past it, 429. */
    replays: tierRate.prefault("60/1m"),
    /** Larger answers are marked completed without a stored body; duplicates get a 409 saying so. */
    max_body: z
      .number()
      .int()
      .min(0)
      .max(10 * 1024 * 1024)
      .default(1024 * 1024),
    /** A duplicate of an in-flight request waits up to this long for its answer (0: 409 at once). */
    wait: duration.optional(),
    /**
     * A 5xx from the origin, or a request it never got: release the claim (a retry runs again) or
     * hold it as indeterminate. An unknown outcome (a timeout with no late answer, a broken
     * connection) is always held.
     */
    on_origin_error: z.enum(["release", "hold"]).default("release"),
    /** Methods the table applies to (GET and HEAD are safe to repeat). */
    methods: z.array(method).min(1).default(["POST", "PUT", "PATCH", "DELETE"]),
  })
  .strict()
  .superRefine((i, ctx) => {
    if (typeof i.derive === "object" && i.ttl !== undefined)
      ctx.addIssue({
        code: "custom",
        path: ["ttl"],
        message: "is derive.window for keys derived from fields (their answer is kept that long): leave ttl out",
      });
  })
  .transform((i) => ({
    ...i,
    principal: Array.isArray(i.principal) ? i.principal : [i.principal],
    wait: i.wait ?? 0,
    ttl: i.ttl ?? (typeof i.derive === "object" ? i.derive.window : 86_400_000),
  }))
  .superRefine((i, ctx) => {
    const what = typeof i.derive === "object" ? ["derive", "window"] : ["ttl"];
    if (i.lease >= i.ttl)
      ctx.addIssue({ code: "custom", path: ["lease"], message: `must be shorter than ${what.join(".")}` });
  });

const sessionSettings = z
  .object({
    /** Whose session: an identity in the key syntax of limits, e.g. "header:x-session-id" or "jwt:sid". */
    key: keyPart,
    /**
     * Whose sessions these are (`auto`, or the key syntax of limits; missing parts fall back to the
     * IP): locks are per principal and session, so knowing another client's session id does not reach its lock.
     */
    principal,
    mode: z.literal("exclusive").default("exclusive"),
    /** How long a grant holds before the next request may take it over. */
    lease: duration.default(30_000),
    /** How long a second call of a busy session waits for the lock (0: 409 at once). */
    wait: duration.optional(),
    /** Methods that take the lock (reads do not). */
    methods: z.array(method).min(1).default(["POST", "PUT", "PATCH", "DELETE"]),
  })
  .strict()
  .transform((s) => ({ ...s, principal: Array.isArray(s.principal) ? s.principal : [s.principal], wait: s.wait ?? 0 }));

/**
 * A route's `adaptive` in-flight limit for its origin (docs/algorithms.md, Adaptive limit; src/features/adaptive/):
 * the limit moves with the origin's latency at `latency` (a percentile) towards `target`, or,
 * without one, towards `tolerance` times the latency it learns the origin has unloaded.
 */
const adaptiveSettings = z
  .object({
    latency: z.enum(["p50", "p75", "p90", "p95", "p99"]).default("p90"),
    target: duration.optional(),
    initial: z.number().int().positive().max(MAX_IN_FLIGHT).default(10),
    min: z.number().int().positive().max(MAX_IN_FLIGHT).default(1),
    max: z.number().int().positive().max(MAX_IN_FLIGHT).default(200),
    /** How often the limit is recomputed from what the region's isolates reported. */
    interval: duration.default(1_000),
    /** How long an in-flight slot is held at most (default: the route's origin_timeout and 5 s more). */
    lease: duration.optional(),
    tolerance: z.number().min(1).max(10).default(1.5),
    /**
     * The most of an isolate's report one client may account for (beyond 10 samples): its further
     * samples do not count, so one client cannot move everybody's limit. 1: no bound.
     */
    client_share: z.number().gt(0).max(1).default(0.25),
    reserve: reserve.optional(),
  })
  .strict()
  .superRefine((a, ctx) => {
    const issue = (path: string, message: string) => ctx.addIssue({ code: "custom", path: [path], message });
    if (a.min > a.max) issue("min", `${a.min} is above max ${a.max}`);
    if (a.initial < a.min || a.initial > a.max) issue("initial", `must be within min ${a.min} and max ${a.max}`);
    if (a.interval < 100 || a.interval > 60_000) issue("interval", "must be from 100ms to 1m");
    if (a.target !== undefined && a.target < 1) issue("target", "must be at least 1ms");
  });

/** The name of the concurrency limit an `adaptive` route gets (a route's own limits may not take it). */
export const ADAPTIVE_LIMIT = "adaptive";

const route = z
  .object({
    name,
    match: z.string().regex(/^\/[^\s?#]*$/, 'must be a path pattern starting with "/" (no query, no spaces)'),
    methods: z.array(method).min(1).optional(),
    /**
     * The origin acts on `X-HTTP-Method-Override` (and `X-HTTP-Method`, `X-Method-Override`) of a
     * POST here: sluice decides on that method and forwards the header. Off: the headers are
     * stripped and the request is the method it was sent with.
     */
    method_override: z.boolean().default(false),
    on_limit: z.enum(["reject", "fallback", "queue", "divert"]).default("reject"),
    /** Where `on_limit = "divert"` sends refused requests (a read replica, a static mirror, a cheaper model). */
    divert_url: z.url({ protocol: /^https?$/, message: "must be an http or https URL" }).optional(),
    /** Past it the divert origin is abandoned, and the refusal falls back (static page, else 429). */
    divert_timeout: duration.default(10_000),
    fallback_ttl: duration.default(300_000),
    fallback: staticFallback.optional(),
    /**
     * "private": a response to a request with a cookie is not kept as a fallback copy unless the
     * origin marks it shareable (as with Authorization). "shared": the route's pages do not depend
     * on cookies, so they are kept.
     */
    fallback_cookies: z.enum(["private", "shared"]).default("private"),
    queue: queueSettings.default(() => queueSettings.parse({})),
    origin_timeout: duration.default(30_000),
    breaker: breakerSettings.optional(),
    /**
     * Decide without spending: the request always goes through, with the RateLimit headers of the
     * buckets as they stand: this route's own (`true`), or another route's, named (a quota endpoint).
     */
    peek: z.union([z.boolean(), name]).default(false),
    /**
     * The requests' priority (docs/algorithms.md, Priorities): a name, or a header or JWT claim that holds one
     * (anything else, or nothing: default). A header is only as trusted as the operator makes it.
     */
    priority: priority.default("default"),
    /** Every limit of the route in shadow mode: decide and count, never block (how a new route is rolled out). */
    shadow: z.boolean().default(false),
    /** One side-effecting call per session at a time (see docs/idempotency-and-sessions.md, Sessions). */
    session: sessionSettings.optional(),
    /** One side effect per Idempotency-Key (see docs/idempotency-and-sessions.md, Idempotency). */
    idempotency: idempotencySettings.optional(),
    /** An in-flight limit for the route's origin that follows its latency (docs/algorithms.md, Adaptive limit). */
    adaptive: adaptiveSettings.optional(),
    limits: z.array(limit).default([]),
  })
  .strict()
  .superRefine((r, ctx) => {
    const seen = new Set<string>();
    r.limits.forEach((l, i) => {
      if (seen.has(l.name) || (r.adaptive && l.name === ADAPTIVE_LIMIT))
        ctx.addIssue({
          code: "custom",
          path: ["limits", i, "name"],
          message: seen.has(l.name)
            ? `duplicate limit name "${l.name}" in route "${r.name}"`
            : `"${ADAPTIVE_LIMIT}" is the name of the route's adaptive limit: give this one another`,
        });
      seen.add(l.name);
    });
    divertProblems(r).forEach(([path, message]) => ctx.addIssue({ code: "custom", path: [path], message }));
  })
  .transform((r) => (r.adaptive ? { ...r, limits: [...r.limits, adaptiveLimit(r.adaptive, r.origin_timeout)] } : r));

/**
 * The concurrency limit an adaptive route is decided with: one bucket per region (`global` key,
 * `region` scope), `initial` slots until the region's Redis holds a learnt figure, which reaches
 * the script as an override of this bucket (src/features/adaptive/).
 */
function adaptiveLimit(a: z.output<typeof adaptiveSettings>, originTimeoutMs: number) {
  return limit.parse({
    name: ADAPTIVE_LIMIT,
    key: "global",
    algorithm: "concurrency",
    limit: a.initial,
    lease: `${a.lease ?? originTimeoutMs + 5_000}ms`,
    ...(a.reserve ? { reserve: a.reserve } : {}),
  });
}

/**
 * A divert route's fields go together, and it takes no idempotency key or session lock: a
 * diverted request leaves before those steps run, so it would reach the divert origin unguarded.
 */
function divertProblems(r: {
  on_limit: string;
  divert_url?: string;
  idempotency?: unknown;
  session?: unknown;
}): Array<[string, string]> {
  if (r.on_limit !== "divert")
    return r.divert_url === undefined ? [] : [["divert_url", 'applies only when on_limit = "divert"']];
  const problems: Array<[string, string]> = [];
  if (r.divert_url === undefined) problems.push(["divert_url", 'is required when on_limit = "divert"']);
  for (const table of ["idempotency", "session"] as const)
    if (r[table] !== undefined)
      problems.push([
        table,
        `cannot be combined with on_limit = "divert": a diverted request leaves before the ${table} step runs, unguarded (give those methods a route of their own)`,
      ]);
  return problems;
}

const region = z
  .object({
    continents: z.array(z.string().regex(/^[A-Z]{2}$/, "must be a two-letter continent code such as EU")).default([]),
    colos: z.array(z.string().regex(/^[A-Z]{3}$/, "must be a three-letter colo code such as FRA")).default([]),
  })
  .strict();

const jwtSettings = z
  .object({
    /** The variable (a secret) holding the HMAC key; ignored when jwks_url is set. */
    secret_env: z
      .string()
      .regex(/^[A-Z_][A-Z0-9_]*$/, "must be an environment variable name")
      .default("SLUICE_JWT_SECRET"),
    alg: z
      .enum(["HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "EdDSA"])
      .default("HS256"),
    jwks_url: z.url({ protocol: /^https?$/ }).optional(),
    issuer: z.string().optional(),
    audience: z.string().optional(),
  })
  .strict();

const pathPolicy = z
  .object({
    /** insensitive: /API/x and /api/x are one path for routes and `path` keys. */
    case: z.enum(["insensitive", "sensitive"]).default("insensitive"),
    /** ignore: /api/x/ and /api/x are one path; strict: they are two. */
    trailing_slash: z.enum(["ignore", "strict"]).default("ignore"),
    /**
     * strip: `;params` are cut from each segment before matching (Tomcat and Spring origins do so:
     * `/public/..;/admin` is their `/admin`); reject: a path with `;` (or `%3B`) is a 400.
     */
    parameters: z.enum(["strip", "reject"]).default("strip"),
  })
  .strict();

function parses(url: string): boolean {
  try {
    return new URL(url).host !== "";
  } catch {
    return false;
  }
}

/** A problem type's base: an absolute http(s) URL or an absolute path, ending in "/" (the type's name follows it). */
const problemBase = z
  .string()
  .max(200)
  .refine(
    // "//host/" would be a URL of whatever scheme the client used: a path starts with one slash
    (v) => /^\/(?:(?!\/)[^\s?#]*\/)?$/.test(v) || (/^https?:\/\/[^\s?#]+\/$/i.test(v) && parses(v)),
    'must be an http(s) URL or an absolute path ending in "/", such as "https://errors.example.com/sluice/"',
  );

export const sluiceSchema = z
  .object({
    key_prefix: z
      .string()
      .regex(/^[A-Za-z0-9_.-]{1,32}$/, "must be 1-32 characters of letters, digits, '_', '.', '-'")
      .default("sluice"),
    /** The floor of a decision's Redis budget, which adapts to each store's round trip (src/store/rtt.ts). */
    timeout_ms: z.number().int().min(1).max(10_000).default(50),
    /** The ceiling of that budget, and the whole budget of an isolate's first call to a store; default max(1000, timeout_ms). */
    max_timeout_ms: z.number().int().min(1).max(10_000).optional(),
    /** Deprecated and ignored: the budget of the home region's Redis adapts like any store's. Accepted so old configurations still load. */
    global_timeout_ms: z.number().int().min(1).max(10_000).optional(),
    /** When the decision's Redis fails: enforce the limits in this isolate (local), forward without them (open), or 503 (closed). */
    on_store_error: z.enum(["local", "open", "closed"]).default("local"),
    rebalance_every: duration.default(5_000),
    home_region: name.default("home"),
    regions: z.record(name, region).default({}),
    routes: z.array(route).default([]),
    jwt: jwtSettings.optional(),
    paths: pathPolicy.default(() => pathPolicy.parse({})),
    /**
     * Where problem `type` URIs point (RFC 9457 §3.1.1): a URL or a path of the deployment's own,
     * never a domain it does not control. The default is served by the Worker itself (docs/configuration.md, Responses).
     */
    problem_base: problemBase.default(DEFAULT_PROBLEM_BASE),
    /** What the dashboard shows of a refused client next to its hash (docs/operating.md, Labels of refused clients). */
    labels: z.enum(["full", "masked", "off"]).default("masked"),
    /** How long a dashboard session may go unused before it ends (docs/operating.md, Admin API); within its 12 hours. */
    admin_session_idle: duration
      .refine((ms) => ms >= 1_000 && ms <= 12 * 3_600_000, "must be between 1s and 12h")
      .default(30 * 60_000),
    /** Entries the ledger keeps (docs/idempotency-and-sessions.md, The ledger): its stream is trimmed to about this many. */
    ledger_length: z.number().int().min(100).max(1_000_000).default(10_000),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.max_timeout_ms !== undefined && c.max_timeout_ms < c.timeout_ms) {
      ctx.addIssue({
        code: "custom",
        path: ["max_timeout_ms"],
        message: `must be at least timeout_ms (${c.timeout_ms}): it is the ceiling of the budget timeout_ms is the floor of`,
      });
    }
    const seen = new Set<string>();
    const regionCount = new Set([c.home_region, ...Object.keys(c.regions)]).size;
    c.routes.forEach((r, i) => {
      if (typeof r.peek === "string" && !c.routes.some((o) => o.name === r.peek))
        ctx.addIssue({ code: "custom", path: ["routes", i, "peek"], message: `names no route ("${r.peek}")` });
      if (seen.has(r.name))
        ctx.addIssue({ code: "custom", path: ["routes", i, "name"], message: `duplicate route name "${r.name}"` });
      seen.add(r.name);
      r.limits.forEach((l, j) => {
        if (l.scope === "split" && Math.min(l.rate, l.burst) < regionCount) {
          ctx.addIssue({
            code: "custom",
            path: ["routes", i, "limits", j, "scope"],
            message: `a split limit needs rate and burst of at least one per region (${regionCount} regions)`,
          });
        }
      });
    });
  });

export type SluiceInput = z.input<typeof sluiceSchema>;
export type SluiceSettings = z.output<typeof sluiceSchema>;
export type RouteSettings = SluiceSettings["routes"][number];
export type LimitSettings = RouteSettings["limits"][number];
