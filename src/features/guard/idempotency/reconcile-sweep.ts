/*
 * The cron trigger's reconciliation (docs/idempotency-and-sessions.md, Reconciliation): each
 * route's indeterminate keys ({key_prefix}:idem:{route}:indeterminate, oldest first) are looked at,
 * those gone or settled leave the index, and on a route with `reconcile` the origin is asked about
 * those indeterminate for longer than `reconcile_after`, whose backoff has passed and whose call
 * cannot still be running: a bounded number per run, a few at a time.
 */
import reconcileLua from "../../../../lua/reconcile.lua";
import type { Config, Route } from "../../../config/index.js";
import { asKeyHash } from "../../../identity/hash.js";
import type { FieldCounter } from "../../../metrics/idempotency.js";
import type { Store } from "../../../store/redis.js";
import { idempotencyIndeterminateKey, idempotencyRecordKey } from "../../../store/layout.js";
import { forEachConcurrently } from "../../../util/concurrently.js";
import { logError } from "../../../util/log.js";
import { newTraceparent } from "../../../util/traceparent.js";
import { refFromHash } from "./record-ref.js";
import { applyAnswer, askOrigin, type ReconcileSettings } from "./reconcile.js";

/** Indeterminate keys looked at per route and run (the oldest), and asked about at most. */
export const SWEEP_LOOK = 100;
export const SWEEP_ASK = 20;
/** Questions to the origin in flight at once (a Worker invocation holds six connections). */
const ASKS_AT_ONCE = 4;
const KEY_HASH = /^[0-9a-f]{32}$/;

/** What one run did, per route: keys still indeterminate after it (of those looked at), asked, settled. */
export interface SweepReport {
  routes: Array<{ route: string; waiting: number; asked: number; settled: number }>;
}

/** One indeterminate key as the index and its record hold it. */
interface Waiting {
  hash: string;
  sinceMs: number;
  fence: string;
  key: string;
  nextMs: number;
  busy: boolean;
}

/**
 * Works through every idempotent route's indeterminate keys in `home` (see the module's comment).
 * Never throws: a route whose store fails is logged and the next one is tried.
 */
export async function reconcileSweep(config: Config, home: Store, metrics?: FieldCounter): Promise<SweepReport> {
  const report: SweepReport = { routes: [] };
  for (const route of config.routes) {
    if (!route.idempotency) continue;
    try {
      report.routes.push(await sweepRoute(config, route, route.idempotency, home, metrics));
    } catch (e) {
      logError("reconcile_sweep_failed", e, { route: route.name });
    }
  }
  return report;
}

async function sweepRoute(
  config: Config,
  route: Route,
  settings: ReconcileSettings,
  home: Store,
  metrics: FieldCounter | undefined,
): Promise<SweepReport["routes"][number]> {
  const { now, waiting } = await lookAt(home, config.key_prefix, route.name);
  const due = waiting
    .filter((w) => w.sinceMs <= now - settings.reconcile_after && w.nextMs <= now && !w.busy && w.key !== "")
    .slice(0, SWEEP_ASK);
  const template = settings.reconcile;
  if (template === undefined) return { route: route.name, waiting: waiting.length, asked: 0, settled: 0 };
  let settled = 0;
  await forEachConcurrently(due, ASKS_AT_ONCE, async (w) => {
    const trail = { trace: newTraceparent(), metrics, ledgerLength: config.ledger_length };
    const says = await askOrigin(
      { template, origin: config.originUrl, key: w.key, fence: w.fence, trace: trail.trace },
      { timeoutMs: settings.reconcile_timeout, maxBody: settings.max_body },
    );
    if (says === undefined) return;
    const ref = { ...refFromHash(home, config.key_prefix, route.name, w.hash), trail };
    const applied = await applyAnswer(ref, w.fence, says, settings);
    if (applied === "applied" && says.kind !== "unknown") settled++;
  });
  return { route: route.name, waiting: waiting.length - settled, asked: due.length, settled };
}

/** The route's oldest indeterminate keys, those no longer so dropped from the index, and Redis's time (ms). */
async function lookAt(store: Store, prefix: string, route: string): Promise<{ now: number; waiting: Waiting[] }> {
  const index = idempotencyIndeterminateKey(prefix, route);
  const script = store.script(reconcileLua);
  const oldest = (await store.run(script, [index], ["oldest", SWEEP_LOOK])) as unknown[];
  // members are record hashes the scripts wrote; anything else never names a key
  const hashes = oldest
    .filter((_, i) => i % 2 === 0)
    .map(String)
    .filter((h) => KEY_HASH.test(h));
  if (hashes.length === 0) return { now: 0, waiting: [] };
  const records = hashes.map((h) => idempotencyRecordKey(prefix, route, asKeyHash(h)));
  const [now, rows] = (await store.run(script, [index, ...records], ["peek", ...hashes])) as [number, unknown[][]];
  const waiting = rows.map(([hash, since, fence, key, next, busy]) => ({
    hash: String(hash),
    sinceMs: Number(since),
    fence: String(fence),
    key: String(key),
    nextMs: Number(next),
    busy: Number(busy) === 1,
  }));
  return { now: Number(now), waiting };
}

/** A route's indeterminate keys, for the dashboard: how many wait, and how long the oldest has (ms). */
export interface IndeterminateWaiting {
  waiting: number;
  oldestMs: number | null;
}

/** Every idempotent route's indeterminate keys (as the index holds them), in one call, by route. */
export async function indeterminateWaiting(
  store: Store,
  config: Pick<Config, "key_prefix" | "routes">,
): Promise<Map<string, IndeterminateWaiting>> {
  const routes = config.routes.filter((r) => r.idempotency).map((r) => r.name);
  if (routes.length === 0) return new Map();
  const keys = routes.map((r) => idempotencyIndeterminateKey(config.key_prefix, r));
  const [now, rows] = (await store.run(store.script(reconcileLua), keys, ["waiting"])) as [number, unknown[][]];
  return new Map(
    routes.map((route, i) => {
      const [count, since] = rows[i] ?? [0, ""];
      const oldestMs = since === "" || since === undefined ? null : Math.max(0, Number(now) - Number(since));
      return [route, { waiting: Number(count), oldestMs }];
    }),
  );
}
