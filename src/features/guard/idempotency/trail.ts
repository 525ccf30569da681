/*
 * What an idempotency record's calls leave besides the record: the ledger entry's context (trace,
 * principal hash, session, origin latency), a log line, and the metrics' outcome count.
 */
import {
  countIdempotency,
  observeFirstArrival,
  type FieldCounter,
  type IdempotencyOutcome,
} from "../../../metrics/idempotency.js";
import { originFailed, type OriginReply } from "../../../origin/forward.js";
import { log } from "../../../util/log.js";
import type { IdKey } from "../../../identity/pseudonym.js";

/** The header that tells the origin the request's trace. */
export function traceHeader(trail: RecordTrail | undefined): Record<string, string> {
  return trail ? { traceparent: trail.trace } : {};
}

/** The context one request's record calls carry: set by the gateway (or the middleware) per request. */
export interface RecordTrail {
  /** The request's W3C `traceparent` (given, or made up and forwarded to the origin). */
  trace: string;
  /** The session the request names (route with sessions): the ledger keeps its hash (`recordRef`). */
  session?: string;
  /** Where the outcomes are counted (none: not counted, as for the operator's resolutions). */
  metrics?: FieldCounter;
  /** The ledger's length (`ledger_length`). */
  ledgerLength?: number;
  /** The origin's latency, once it answered (or failed): set before the claim is settled. */
  latencyMs?: number;
  /** The deployment's key of the ids the ledger and the logs show (principal, session). */
  idKey?: IdKey;
  /** The MCP tool a guarded call names (src/features/mcp/): its ledger entries say which. */
  tool?: string;
}

/** What idempotency.lua puts beside each ledger entry (its last argument, JSON). */
export function ledgerContext(trail: RecordTrail | undefined, principal: string | undefined): string {
  return JSON.stringify({
    trace: trail?.trace ?? "",
    principal: principal ?? "",
    session: trail?.session ?? "",
    latency_ms: trail?.latencyMs === undefined ? "" : String(Math.round(trail.latencyMs)),
    ...(trail?.tool === undefined ? {} : { tool: trail.tool }),
  });
}

/** Where a trail's outcome is reported: the record's route, key hash and principal hash. */
export interface TrailSubject {
  route: string;
  keyHash: string;
  principal?: string;
  trail?: RecordTrail;
}

/**
 * Counts `outcome` (when it is one of the metric's) and logs a ledgered `event` with the trace, so
 * a log line and a ledger entry of one request are found by the same `traceparent`. A refusal
 * (`event` undefined) is only counted: its decision's log line carries the trace already.
 */
export function noteIdempotency(r: TrailSubject, event: string | undefined, outcome?: IdempotencyOutcome): void {
  const t = r.trail;
  if (!t) return;
  if (outcome && t.metrics) countIdempotency(t.metrics, r.route, outcome);
  if (event === undefined) return;
  log("idempotency", {
    what: event,
    route: r.route,
    key: r.keyHash,
    principal: r.principal ?? null,
    trace: t.trace,
    ...(t.latencyMs === undefined ? {} : { latency_ms: Math.round(t.latencyMs) }),
  });
}

/**
 * Notes the origin's answer to the claim's request before the claim is settled: its latency goes
 * to the ledger entry and the route's first-arrival histogram, a failure to the failures count.
 */
export function noteOriginReply(r: TrailSubject, reply: OriginReply & { latencyMs?: number }): void {
  const t = r.trail;
  if (!t || reply.latencyMs === undefined) return;
  t.latencyMs = reply.latencyMs;
  const failed = originFailed(reply) || reply.outcome === "unrelayable";
  if (t.metrics) observeFirstArrival(t.metrics, r.route, reply.latencyMs, failed);
}
