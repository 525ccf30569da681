import { Hono, type Context } from "hono";
import { z } from "zod";
import { readTrailPage, type LedgerEntry, type Trail } from "../store/ledger.js";
import { required, type AdminEnv } from "../operator/context.js";
import { invalidRequest } from "../operator/validate.js";
import { PROBLEMS } from "../problem-types.js";

/** `GET /__sluice/ledger`: the ledger and the operators' audit trail, filtered and paged (see `answerLedger`). */
export function ledgerApp(): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();
  app.get("/", answerLedger);
  return app;
}

/** Entries read per XREVRANGE while filtering. */
const PAGE = 500;
/**
 * XREVRANGE calls one answer may make: each is a subrequest of the Worker's invocation (50 on the
 * Free plan, 1 000 on a paid one), so an export of a ledger of a million entries is a series of
 * answers, each within the limit, that the client follows by `cursor`, never one answer.
 */
export const MAX_READS = 20;
/** Entries one answer gives at most (the default of an NDJSON export, which then pages on). */
export const MAX_COUNT = 10_000;
const HASH = /^[0-9a-f]{32}$/;
const STREAM_ID = /^\d{1,20}-\d{1,20}$/;

/** `since`: ms since the epoch, or an ISO 8601 date. */
const since = z
  .string()
  .transform((v, ctx) => {
    const ms = /^\d{1,15}$/.test(v) ? Number(v) : Date.parse(v);
    if (Number.isFinite(ms) && ms >= 0) return ms;
    ctx.addIssue({ code: "custom", message: "must be ms since the epoch or an ISO 8601 date" });
    return z.NEVER;
  })
  .optional();

/** Where each trail's reading stands: `+` not started, `done`, or the id of the last entry given. */
const position = z.union([z.literal("+"), z.literal("done"), z.string().regex(STREAM_ID)]);
const cursor = z
  .string()
  .transform((v, ctx) => {
    const [ledger, audit, extra] = v.split("~");
    const parsed = z.tuple([position, position]).safeParse([ledger, audit]);
    if (extra === undefined && parsed.success) return { ledger: parsed.data[0], audit: parsed.data[1] };
    ctx.addIssue({ code: "custom", message: "must be a cursor as `next_cursor` gave it" });
    return z.NEVER;
  })
  .optional();

const ledgerQuery = z
  .object({
    route: z.string().min(1).max(63).optional(),
    key: z.string().regex(HASH, "must be a key hash as the ledger shows it").optional(),
    principal: z.string().regex(HASH, "must be a principal hash as the ledger shows it").optional(),
    since,
    count: z.coerce.number().int().min(1).optional(),
    format: z.enum(["json", "ndjson"]).optional(),
    trail: z.enum(["all", "ledger", "audit"]).optional(),
    cursor,
  })
  .strict();

type LedgerQuery = z.output<typeof ledgerQuery>;
/** Where each trail's reading stands (see `position`). */
export type Positions = Record<Trail, string>;

/**
 * `GET /__sluice/ledger`: the ledger (idempotency and session outcomes) and the audit trail (the
 * operators' changes), merged newest first (`trail=ledger` or `trail=audit` for one), filtered by
 * `route`, `key` (hash), `principal` (hash) and `since`, up to `count` entries (100 by default, 10 000
 * in NDJSON, at most 10 000). JSON (`{ entries, next_cursor }`), or NDJSON, one entry a line, with
 * `Accept: application/x-ndjson` or `?format=ndjson`. One answer reads at most `MAX_READS` pages:
 * when more may follow, `next_cursor` (and a `Link: <…>; rel="next"` header) says where the next
 * answer starts, with the same query and `cursor=`.
 */
export async function answerLedger(c: Context<AdminEnv>): Promise<Response> {
  const parsed = ledgerQuery.safeParse(c.req.query());
  if (!parsed.success) throw invalidRequest(parsed.error);
  const q = parsed.data;
  const config = c.get("config");
  const ndjson = q.format === "ndjson" || (!q.format && /application\/x-ndjson/i.test(c.req.header("accept") ?? ""));
  const count = Math.min(MAX_COUNT, q.count ?? (ndjson ? MAX_COUNT : 100));
  const store = required(
    c.get("stores").offPath(),
    PROBLEMS.ledgerUnavailable,
    "no Redis configured for the home region",
  );
  const page: TrailPage = (trail, end, start, n) => readTrailPage(store, config.key_prefix, trail, end, start, n);
  const { entries, next } = await walk(q, count, startingAt(q), MAX_READS, page);
  const nextCursor = next && `${next.ledger}~${next.audit}`;
  const link: Record<string, string> = nextCursor ? { link: `<${nextUrl(c.req.url, nextCursor)}>; rel="next"` } : {};
  if (!ndjson) return c.json({ entries, next_cursor: nextCursor ?? null }, 200, link);
  const body = entries.map((e) => JSON.stringify(e) + "\n").join("");
  return c.body(body, 200, { "content-type": "application/x-ndjson; charset=utf-8", ...link });
}

/** Where a query's reading starts: its cursor, else the newest entry of each trail it reads. */
function startingAt(q: LedgerQuery): Positions {
  if (q.cursor) return q.cursor;
  const trail = q.trail ?? "all";
  return { ledger: trail === "audit" ? "done" : "+", audit: trail === "ledger" ? "done" : "+" };
}

/** The request's URL with `cursor` set to the next answer's (the path and the other parameters as they came). */
function nextUrl(url: string, next: string): string {
  const u = new URL(url);
  u.searchParams.set("cursor", next);
  return `${u.pathname}${u.search}`;
}

/** One XREVRANGE of a trail: newest first, from `end` down to `start`, at most `count`. */
export type TrailPage = (trail: Trail, end: string, start: string, count: number) => Promise<LedgerEntry[]>;

/** A trail's entries read but not yet given, and whether anything older is left to read. */
interface Reading {
  at: string;
  buffer: LedgerEntry[];
  more: boolean;
}

/**
 * Walks the trails back from `from`, merging them newest first, until `count` entries pass the
 * filters, every trail is read to its end (or to `since`), or `maxReads` pages were read: the
 * entries, and where the next walk starts (`undefined`: nothing is left).
 */
export async function walk(
  q: Pick<LedgerQuery, "route" | "key" | "principal" | "since">,
  count: number,
  from: Positions,
  maxReads: number,
  page: TrailPage,
): Promise<{ entries: LedgerEntry[]; next?: Positions }> {
  const start = q.since === undefined ? "-" : `${q.since}-0`;
  const readings = new Map<Trail, Reading>();
  for (const trail of ["ledger", "audit"] as const)
    readings.set(trail, { at: from[trail], buffer: [], more: from[trail] !== "done" });
  const found: LedgerEntry[] = [];
  let reads = 0;
  while (found.length < count) {
    for (const [trail, r] of readings) {
      if (r.buffer.length > 0 || !r.more) continue;
      if (reads >= maxReads) return { entries: found, next: positionsOf(readings) };
      r.buffer = await page(trail, r.at === "+" ? "+" : `(${r.at}`, start, PAGE);
      reads++;
      r.more = r.buffer.length === PAGE;
    }
    const newest = newestOf(readings);
    if (!newest) return { entries: found };
    const e = newest.buffer.shift() as LedgerEntry;
    newest.at = e.id;
    if (passes(e, q)) found.push(e);
  }
  const next = positionsOf(readings);
  return next.ledger === "done" && next.audit === "done" ? { entries: found } : { entries: found, next };
}

/** Each trail's position once what was given is given: `done` when nothing is left in it. */
function positionsOf(readings: Map<Trail, Reading>): Positions {
  const of = (t: Trail) => {
    const r = readings.get(t) as Reading;
    return r.buffer.length === 0 && !r.more ? "done" : r.at;
  };
  return { ledger: of("ledger"), audit: of("audit") };
}

/** The reading whose next entry is the newest (stream ids order by time, then sequence). */
function newestOf(readings: Map<Trail, Reading>): Reading | undefined {
  let best: Reading | undefined;
  for (const r of readings.values()) {
    const head = r.buffer[0];
    if (head && (!best || newer(head.id, (best.buffer[0] as LedgerEntry).id))) best = r;
  }
  return best;
}

function newer(a: string, b: string): boolean {
  const [am, as] = a.split("-").map(BigInt) as [bigint, bigint];
  const [bm, bs] = b.split("-").map(BigInt) as [bigint, bigint];
  return am > bm || (am === bm && as > bs);
}

/**
 * One trail's entries passing the filters, at most `count`, scanning at most about `length` of
 * them (whole pages): the walk of the ledger alone.
 */
export async function matching(
  q: Pick<LedgerQuery, "route" | "key" | "principal" | "since">,
  count: number,
  length: number,
  page: (end: string, start: string, count: number) => Promise<LedgerEntry[]>,
): Promise<LedgerEntry[]> {
  const from: Positions = { ledger: "+", audit: "done" };
  const reads = Math.max(1, Math.ceil(length / PAGE));
  return (await walk(q, count, from, reads, (_trail, end, start, n) => page(end, start, n))).entries;
}

function passes(e: LedgerEntry, q: Pick<LedgerQuery, "route" | "key" | "principal">): boolean {
  return (
    (q.route === undefined || e.route === q.route) &&
    (q.key === undefined || e.key === q.key) &&
    (q.principal === undefined || e.principal === q.principal)
  );
}
