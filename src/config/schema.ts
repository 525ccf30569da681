import { z } from "zod";
import { duration, method, name } from "./primitives.js";
import { DEFAULT_PROBLEM_BASE } from "../problem.js";
import { adaptiveLimit, adaptiveSettings, ADAPTIVE_LIMIT } from "../features/adaptive/schema.js";
import { breakerSettings } from "../features/breaker/schema.js";
import { idempotencySettings } from "../features/idempotency/schema.js";
import { jwtSettings } from "../features/jwt/schema.js";
import { limit, priority } from "../features/rate-limit/schema.js";
import { sessionSettings } from "../features/session/schema.js";
import { divertProblems, sheddingOptions } from "../features/shedding/schema.js";

export { ADAPTIVE_LIMIT };

// The configuration of [vars.SLUICE]: each feature's options come from its folder
// (src/features/*/schema.ts), written in the shared pieces of ./primitives.ts; here they are
// composed into a route and the whole.

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
    ...sheddingOptions,
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

const region = z
  .object({
    continents: z.array(z.string().regex(/^[A-Z]{2}$/, "must be a two-letter continent code such as EU")).default([]),
    colos: z.array(z.string().regex(/^[A-Z]{3}$/, "must be a three-letter colo code such as FRA")).default([]),
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
    /** Where decision counts go (docs/operating.md, Metrics): the home region's Redis, at most once per isolate per interval, or nowhere. */
    metrics: z.enum(["redis", "off"]).default("redis"),
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
