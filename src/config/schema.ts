import { z } from "zod";
import { parseDuration } from "./duration.js";

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

const ALGORITHMS = ["token_bucket", "leaky_bucket", "fixed_window", "sliding_window"] as const;

const limit = z
  .object({
    name,
    key: z.union([keyPart, z.array(keyPart).min(1).max(8)]).default("ip"),
    algorithm: z.enum(ALGORITHMS).default("token_bucket"),
    rate: z.number().int().positive().max(1_000_000_000),
    period: duration,
    burst: z.number().int().positive().max(1_000_000_000).optional(),
    /** Tokens one request takes: a number, or "header:<name>" read from the request (bounded by max_cost). */
    cost: z.union([z.number().int().positive(), z.string().regex(/^header:[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'must be a number or "header:<name>"')]).default(1),
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
    /** Let isolates hold leases on this limit's buckets (README, Leases); default: wherever the limit can be leased. */
    lease: z.boolean().optional(),
  })
  .strict()
  .transform((l) => {
    const costHeader = typeof l.cost === "string" ? l.cost.slice(7).toLowerCase() : undefined;
    return {
      ...l,
      key: Array.isArray(l.key) ? l.key : [l.key],
      burst: l.burst ?? l.rate,
      cost: typeof l.cost === "number" ? l.cost : 1,
      costHeader,
      max_delay: l.max_delay ?? 1_000,
      nodelay: l.nodelay ?? false,
      lease: l.lease ?? leasableShape({ ...l, costHeader }),
    };
  })
  .superRefine((l, ctx) => {
    const issue = (path: string, message: string) => ctx.addIssue({ code: "custom", path: [path], message });
    const windowed = l.algorithm === "fixed_window" || l.algorithm === "sliding_window";
    const input = l as { burst?: number };
    if (windowed && input.burst !== l.rate) issue("burst", `does not apply to ${l.algorithm}: the window holds \`rate\``);
    if (l.warmup !== undefined && l.algorithm !== "token_bucket") issue("warmup", "applies to token_bucket only");
    if ((l.nodelay || l.max_delay !== 1_000) && l.algorithm !== "leaky_bucket") issue(l.nodelay ? "nodelay" : "max_delay", "applies to leaky_bucket only");
    const maxCost = l.costHeader ? l.max_cost : l.cost;
    if (l.costHeader && l.max_cost === undefined) issue("max_cost", 'is required when cost comes from a header ("header:<name>")');
    if (!l.costHeader && l.max_cost !== undefined) issue("max_cost", "applies only when cost comes from a header");
    const capacities = [l.burst, ...Object.values(l.rates ?? {}).map((t) => t.rate)];
    if (maxCost !== undefined && maxCost > Math.min(...capacities)) issue(l.costHeader ? "max_cost" : "cost", `cost ${maxCost} exceeds the capacity ${Math.min(...capacities)}: such a request could never pass`);
    if ((l.tier === undefined) !== (l.rates === undefined)) issue(l.tier === undefined ? "tier" : "rates", "tier and rates go together");
    if (l.lease && !leasableShape(l)) issue("lease", "applies to token_bucket (without warmup) and fixed_window limits that are not split, with a fixed cost and no tier");
  });

/**
 * Whether a limit's shape allows leases: token buckets without warm-up and fixed windows, whose
 * every token admits one cost unit whenever it is spent, with a fixed cost and no tier (a header
 * cost or a tier's rate is decided per request), and not `split` (its share moves). Shadow limits
 * are not leased either (see src/limiter/lease-broker.ts).
 */
export function leasableShape(l: { algorithm: string; warmup?: number; scope: string; costHeader?: string; tier?: string }): boolean {
  const algorithm = l.algorithm === "fixed_window" || (l.algorithm === "token_bucket" && l.warmup === undefined);
  return algorithm && l.scope !== "split" && l.costHeader === undefined && l.tier === undefined;
}

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
    max_body: z.number().int().min(0).max(100 * 1024).default(64 * 1024),
    /** Request headers kept with the job (those a limit keys on are always kept). */
    headers: z.array(z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, "must be a header name").transform((h) => h.toLowerCase())).default(["content-type"]),
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

const idempotencySettings = z
  .object({
    /** Whose keys these are: an identity (the key syntax of limits). Two principals never collide. */
    principal: z.union([keyPart, z.array(keyPart).min(1).max(4)]).default("ip"),
    /** A request without Idempotency-Key is a 400 problem. */
    required: z.boolean().default(false),
    /** Without the header, derive the key from method, route, principal and the canonical JSON body. */
    derive: z.boolean().default(false),
    /** Top-level JSON body fields left out of the canonical body (timestamps, nonces). */
    ignore: z.array(z.string().min(1).max(128)).default([]),
    /** How long a claim is held before another request may take it over. */
    lease: duration.default(30_000),
    /** How long a completed answer is replayed. */
    ttl: duration.default(86_400_000),
    /** Larger answers are marked completed without a stored body; duplicates get a 409 saying so. */
    max_body: z.number().int().min(0).max(10 * 1024 * 1024).default(1024 * 1024),
    /** A duplicate of an in-flight request waits up to this long for its answer (0: 409 at once). */
    wait: duration.optional(),
    /** A 5xx or network error at the origin: release the claim (a retry runs again) or hold it as indeterminate. */
    on_origin_error: z.enum(["release", "hold"]).default("release"),
    /** Methods the table applies to (GET and HEAD are safe to repeat). */
    methods: z.array(method).min(1).default(["POST", "PUT", "PATCH", "DELETE"]),
  })
  .strict()
  .transform((i) => ({ ...i, principal: Array.isArray(i.principal) ? i.principal : [i.principal], wait: i.wait ?? 0 }))
  .superRefine((i, ctx) => {
    if (i.lease >= i.ttl) ctx.addIssue({ code: "custom", path: ["lease"], message: "must be shorter than ttl" });
  });

const sessionSettings = z
  .object({
    /** Whose session: an identity in the key syntax of limits, e.g. "header:x-session-id" or "jwt:sid". */
    key: keyPart,
    /**
     * Whose sessions these are (the key syntax of limits; missing parts fall back to the IP): locks
     * are per principal and session, so knowing another client's session id does not reach its lock.
     */
    principal: z.union([keyPart, z.array(keyPart).min(1).max(4)]).default("ip"),
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

const route = z
  .object({
    name,
    match: z.string().regex(/^\/[^\s?#]*$/, 'must be a path pattern starting with "/" (no query, no spaces)'),
    methods: z.array(method).min(1).optional(),
    on_limit: z.enum(["reject", "fallback", "queue"]).default("reject"),
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
    /** Every limit of the route in shadow mode: decide and count, never block (how a new route is rolled out). */
    shadow: z.boolean().default(false),
    /** One side-effecting call per session at a time (see README, Sessions). */
    session: sessionSettings.optional(),
    /** One side effect per Idempotency-Key (see README, Idempotency). */
    idempotency: idempotencySettings.optional(),
    limits: z.array(limit).default([]),
  })
  .strict()
  .superRefine((r, ctx) => {
    const seen = new Set<string>();
    r.limits.forEach((l, i) => {
      if (seen.has(l.name)) ctx.addIssue({ code: "custom", path: ["limits", i, "name"], message: `duplicate limit name "${l.name}" in route "${r.name}"` });
      seen.add(l.name);
    });
  });

const region = z
  .object({
    continents: z.array(z.string().regex(/^[A-Z]{2}$/, "must be a two-letter continent code such as EU")).default([]),
    colos: z.array(z.string().regex(/^[A-Z]{3}$/, "must be a three-letter colo code such as FRA")).default([]),
  })
  .strict();

const jwtSettings = z
  .object({
    /** The variable (a secret) holding the HMAC key; ignored when jwks_url is set. */
    secret_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/, "must be an environment variable name").default("SLUICE_JWT_SECRET"),
    alg: z.enum(["HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "EdDSA"]).default("HS256"),
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

export const sluiceSchema = z
  .object({
    key_prefix: z.string().regex(/^[A-Za-z0-9_.-]{1,32}$/, "must be 1-32 characters of letters, digits, '_', '.', '-'").default("sluice"),
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
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.max_timeout_ms !== undefined && c.max_timeout_ms < c.timeout_ms) {
      ctx.addIssue({ code: "custom", path: ["max_timeout_ms"], message: `must be at least timeout_ms (${c.timeout_ms}): it is the ceiling of the budget timeout_ms is the floor of` });
    }
    const seen = new Set<string>();
    const regionCount = new Set([c.home_region, ...Object.keys(c.regions)]).size;
    c.routes.forEach((r, i) => {
      if (typeof r.peek === "string" && !c.routes.some((o) => o.name === r.peek)) ctx.addIssue({ code: "custom", path: ["routes", i, "peek"], message: `names no route ("${r.peek}")` });
      if (seen.has(r.name)) ctx.addIssue({ code: "custom", path: ["routes", i, "name"], message: `duplicate route name "${r.name}"` });
      seen.add(r.name);
      r.limits.forEach((l, j) => {
        if (l.scope === "split" && Math.min(l.rate, l.burst) < regionCount) {
          ctx.addIssue({ code: "custom", path: ["routes", i, "limits", j, "scope"], message: `a split limit needs rate and burst of at least one per region (${regionCount} regions)` });
        }
      });
    });
  });

export type SluiceInput = z.input<typeof sluiceSchema>;
export type SluiceSettings = z.output<typeof sluiceSchema>;
export type RouteSettings = SluiceSettings["routes"][number];
export type LimitSettings = RouteSettings["limits"][number];
