import { Hono } from "hono";
import { z } from "zod";
import type { Config, Limit } from "../../config/index.js";
import { parseDuration } from "../../config/duration.js";
import { exactnessProblem } from "../../config/exactness.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { everyStore, type Stores } from "../../region/index.js";
import {
  decodeOverride,
  encodeOverride,
  readOverrides,
  removeOverride as removeField,
  writeOverride,
} from "./decision/overrides-store.js";
import { overridesKey } from "../../store/layout.js";
import { adminHandlers, requireServed, type AdminEnv } from "../../operator/context.js";
import { findLimit, overrideFieldFor } from "./admin-identity.js";
import { ledgerAdminAction } from "../../operator/ledger.js";
import { badRequest, duration, jsonBody } from "../../operator/validate.js";

const overrideBody = z
  .object({
    route: z.string(),
    limit: z.string(),
    rate: z.number().int().positive().max(1_000_000_000),
    burst: z.number().int().positive().max(1_000_000_000).optional(),
    period: duration.optional(),
    /** The client, as key parts (`{ "ip": "203.0.113.9" }`); absent: everybody. */
    identity: z.record(z.string(), z.string()).optional(),
    region: z.string().optional(),
    ttl: duration,
  })
  .strict();
type OverrideBody = z.output<typeof overrideBody>;

const removalBody = z
  .object({
    route: z.string(),
    limit: z.string(),
    identity: z.record(z.string(), z.string()).optional(),
    region: z.string().optional(),
  })
  .strict();

const setOverride = adminHandlers.createHandlers(jsonBody(overrideBody), async (c) => {
  const config = c.get("config");
  const o = c.req.valid("json");
  const limit = limitOf(config, o.route, o.limit, `no limit "${o.limit}" in a route "${o.route}"`);
  // an override of a route no middleware decides would answer ok and change nothing
  requireServed(c, o.route, "limits", o.limit);
  const periodMs = o.period ? (parseDuration(o.period) as number) : limit.period;
  checkExact(limit, o, periodMs);
  const field = await overrideFieldFor(config, limit, o.identity, o.region);
  const ms = parseDuration(o.ttl) as number;
  const until = Date.now() + ms;
  const value = encodeOverride({ rate: o.rate, burst: o.burst ?? o.rate, periodMs, until });
  const key = overridesKey(config.key_prefix, o.route);
  await Promise.all(everyStore(config, c.get("stores")).map((s) => writeOverride(s, key, field, value, ms)));
  const detail = { route: o.route, limit: o.limit, field, rate: o.rate, burst: o.burst ?? o.rate, period_ms: periodMs };
  await ledgerAdminAction(c, "admin_override", { ...detail, region: o.region, ttl: o.ttl, until });
  return c.json({ ok: true, key, field, value, expires_at: new Date(until).toISOString() });
});

const listOverrides = adminHandlers.createHandlers(async (c) =>
  c.json({ overrides: await overridesInForce(c.get("config"), c.get("stores")) }),
);

/** An override in force, as `GET /__sluice/overrides` shows it. */
export interface OverrideRow {
  route: string;
  field: string;
  rate: number;
  burst: number;
  period_ms: number;
  expires_at: string;
}

/** Every route's overrides that have not run out, as the home region holds them. */
export async function overridesInForce(config: Config, stores: Stores): Promise<OverrideRow[]> {
  const home = stores.offPath();
  const out: OverrideRow[] = [];
  for (const r of config.routes) {
    const hash = home ? await readOverrides(home, overridesKey(config.key_prefix, r.name)) : {};
    out.push(...inForce(r.name, hash, Date.now()));
  }
  return out;
}

const removeOverride = adminHandlers.createHandlers(jsonBody(removalBody), async (c) => {
  const config = c.get("config");
  const b = c.req.valid("json");
  const limit = limitOf(config, b.route, b.limit, "no such route or limit");
  const field = await overrideFieldFor(config, limit, b.identity, b.region);
  const key = overridesKey(config.key_prefix, b.route);
  await Promise.all(everyStore(config, c.get("stores")).map((s) => removeField(s, key, field)));
  await ledgerAdminAction(c, "admin_override_removed", { route: b.route, limit: b.limit, field, region: b.region });
  return c.json({ ok: true, removed: field });
});

/**
 * `/__sluice/overrides`: `PUT` sets the rate (and burst, period) of a limit for one client, or for
 * everybody without `identity`, until `ttl` runs out, in every region's Redis; `GET` lists the
 * overrides in force (as the home region holds them); `DELETE` removes one.
 */
export function overridesApp(): Hono<AdminEnv> {
  return new Hono<AdminEnv>()
    .put("/", ...setOverride)
    .get("/", ...listOverrides)
    .delete("/", ...removeOverride);
}

/** The overrides of one route's hash (`field` → `rate:burst:period_ms:until_ms`) that have not run out. */
function inForce(route: string, hash: Record<string, string>, now: number): OverrideRow[] {
  return Object.entries(hash).flatMap(([field, v]) => {
    const { rate, burst, periodMs, until } = decodeOverride(v);
    if (until <= now) return [];
    return [{ route, field, rate, burst, period_ms: periodMs, expires_at: new Date(until).toISOString() }];
  });
}

function limitOf(config: Config, route: string, limit: string, detail: string): Limit {
  const found = findLimit(config, route, limit);
  if (!found) throw new Problem({ type: PROBLEMS.noSuchLimit, detail });
  return found.limit;
}

/**
 * An override is checked like a configured limit: figures the decision script cannot count
 * exactly are a 400 naming the field. The burst defaults to the rate, so a burst the body does
 * not have is named as the rate it came from.
 */
function checkExact(limit: Limit, o: OverrideBody, periodMs: number): void {
  // a sliding log's margin is added to the period it counts over: no longer than the period itself
  if (limit.margin !== undefined && limit.margin > periodMs)
    throw badRequest(`period: ${periodMs} ms is shorter than the limit's margin (${limit.margin} ms)`);
  const inexact = exactnessProblem({ algorithm: limit.algorithm, rate: o.rate, burst: o.burst ?? o.rate, periodMs });
  if (!inexact) return;
  throw badRequest(
    `${inexact.field === "burst" && o.burst === undefined ? "rate" : inexact.field}: ${inexact.message}`,
  );
}
