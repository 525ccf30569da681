import { Hono, type Context } from "hono";
import { z } from "zod";
import { readLedgerPage, type LedgerEntry } from "../store/ledger.js";
import { required, type AdminEnv } from "../operator/context.js";
import { invalidRequest } from "../operator/validate.js";
import { PROBLEMS } from "../problem-types.js";

/** `GET /__sluice/ledger`: the idempotency (and session, and operator) ledger, filtered (see `answerLedger`). */
export function ledgerApp(): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();
  app.get("/", answerLedger);
  return app;
}

/** Entries read per XREVRANGE while filtering. */
const PAGE = 500;
const HASH = /^[0-9a-f]{32}$/;

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

const ledgerQuery = z
  .object({
    route: z.string().min(1).max(63).optional(),
    key: z.string().regex(HASH, "must be a key hash as the ledger shows it").optional(),
    principal: z.string().regex(HASH, "must be a principal hash as the ledger shows it").optional(),
    since,
    count: z.coerce.number().int().min(1).optional(),
    format: z.enum(["json", "ndjson"]).optional(),
  })
  .strict();

type LedgerQuery = z.output<typeof ledgerQuery>;

/**
 * `GET /__sluice/ledger`: the ledger, newest first, filtered by `route`, `key` (hash), `principal`
 * (hash) and `since`, up to `count` entries (100 by default, the whole ledger in NDJSON). JSON
 * (`{ entries }`), or NDJSON, one entry a line, with `Accept: application/x-ndjson` or `?format=ndjson`.
 */
export async function answerLedger(c: Context<AdminEnv>): Promise<Response> {
  const parsed = ledgerQuery.safeParse(c.req.query());
  if (!parsed.success) throw invalidRequest(parsed.error);
  const q = parsed.data;
  const config = c.get("config");
  const ndjson = q.format === "ndjson" || (!q.format && /application\/x-ndjson/i.test(c.req.header("accept") ?? ""));
  const count = Math.min(config.ledger_length, q.count ?? (ndjson ? config.ledger_length : 100));
  const store = required(
    c.get("stores").offPath(),
    PROBLEMS.ledgerUnavailable,
    "no Redis configured for the home region",
  );
  const entries = await matching(q, count, config.ledger_length, (end, start, n) =>
    readLedgerPage(store, config.key_prefix, end, start, n),
  );
  if (!ndjson) return c.json({ entries });
  const body = entries.map((e) => JSON.stringify(e) + "\n").join("");
  return c.body(body, 200, { "content-type": "application/x-ndjson; charset=utf-8" });
}

type Page = (end: string, start: string, count: number) => Promise<LedgerEntry[]>;

/** Pages back through the ledger (at most its length) until `count` entries pass the filters. */
export async function matching(q: LedgerQuery, count: number, length: number, page: Page): Promise<LedgerEntry[]> {
  const start = q.since === undefined ? "-" : `${q.since}-0`;
  const found: LedgerEntry[] = [];
  let end = "+";
  for (let scanned = 0; scanned < length && found.length < count;) {
    const entries = await page(end, start, PAGE);
    for (const e of entries) if (passes(e, q) && found.length < count) found.push(e);
    scanned += entries.length;
    const last = entries[entries.length - 1];
    if (!last || entries.length < PAGE) break;
    end = `(${last.id}`;
  }
  return found;
}

function passes(e: LedgerEntry, q: LedgerQuery): boolean {
  return (
    (q.route === undefined || e.route === q.route) &&
    (q.key === undefined || e.key === q.key) &&
    (q.principal === undefined || e.principal === q.principal)
  );
}
