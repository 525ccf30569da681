/*
 * Reconciliation (docs/idempotency-and-sessions.md, Reconciliation): an indeterminate key (the
 * origin may have acted, sluice never learnt its answer) is settled by asking the origin's
 * reconcile endpoint, `GET` with the key and the claim's fencing token. 2xx: the call happened,
 * its answer (status in `Sluice-Original-Status`, default 201; the body) is stored and replayed;
 * 404: it never happened, the key is released; anything else: still unknown. The answer is
 * applied atomically and only to the claim asked about (lua/reconcile.lua): a resolution, a later
 * claim or another reconciliation meanwhile wins.
 */
import reconcileLua from "../../../../lua/reconcile.lua";
import { asKeyHash } from "../../../identity/hash.js";
import { BODILESS_STATUSES } from "../../../operator/validate.js";
import { idempotencyIndeterminateKey, idempotencyRecordKey, ledgerKey } from "../../../store/layout.js";
import { toBase64 } from "../../../util/base64.js";
import { readCapped } from "../../../util/body.js";
import { discardBody, log, logError } from "../../../util/log.js";
import type { RecordRef } from "./record-ref.js";
import { answerArgs, LEDGER_MAXLEN, type Claim, type StoredAnswer } from "./records.js";
import { replayedHeaders } from "./replayed-headers.js";
import { reconcileUrl } from "./reconcile-url.js";
import { noteIdempotency } from "./trail.js";
import { scriptReply } from "../../../store/replies.js";

/** The status the call answered with, when the reconcile answer does not say (a create). */
export const DEFAULT_ORIGINAL_STATUS = 201;
const ORIGINAL_STATUS_HEADER = "sluice-original-status";

/** What the reconcile endpoint said of a key. */
export type OriginSays = ({ kind: "found" } & StoredAnswer) | { kind: "absent" } | { kind: "unknown"; status?: number };

/** The reconcile fields of a route's idempotency settings. */
export interface ReconcileSettings {
  reconcile?: string;
  reconcile_timeout: number;
  reconcile_after: number;
  max_body: number;
  ttl: number;
}

/**
 * What is asked: the key by name, and the fencing token of the claim whose outcome is unknown, at
 * the route's reconcile `template` (a path on `origin`, or a full URL: reconcile-url.ts).
 */
export interface Question {
  template: string;
  origin: URL | undefined;
  key: string;
  fence: string;
  trace?: string;
}

/**
 * Asks the origin about a key, within `timeoutMs` (the body read included). Undefined when there
 * is no URL to ask at (`reconcileUrl`): the key is not asked about, and waits for an operator.
 * Never throws: no answer in time, a network error, or an answer that is neither 2xx nor 404 is
 * `unknown`; a 2xx whose `Sluice-Original-Status` is not a final status (200-599) is `unknown`
 * too. A body past `maxBody` is kept as a stored answer is: completed, its body not stored.
 */
export async function askOrigin(
  q: Question,
  limits: { timeoutMs: number; maxBody: number },
): Promise<OriginSays | undefined> {
  // the URL is made here, where it is asked, so every caller (a duplicate, the sweep, a job) asks alike
  const url = reconcileUrl(q.template, q.origin, q.key);
  if (url === undefined) return undefined;
  const headers: Record<string, string> = { "idempotency-key": q.key, "sluice-fencing-token": q.fence };
  if (q.trace) headers.traceparent = q.trace;
  try {
    const signal = AbortSignal.timeout(limits.timeoutMs);
    const res = await fetch(url, { method: "GET", headers, redirect: "manual", signal });
    if (res.status === 404) {
      await discardBody(res.body);
      return { kind: "absent" };
    }
    const status = res.ok ? originalStatus(res.headers.get(ORIGINAL_STATUS_HEADER)) : undefined;
    if (status === undefined) {
      await discardBody(res.body);
      return { kind: "unknown", status: res.status };
    }
    const read = await readCapped(res.body, limits.maxBody);
    const body = read.whole && !BODILESS_STATUSES.has(status) ? toBase64(read.bytes) : "";
    return { kind: "found", status, headers: replayedHeaders(res), body, stored: read.whole };
  } catch (e) {
    logError("reconcile_ask_failed", e, { url: new URL(url).origin });
    return { kind: "unknown" };
  }
}

/** `Sluice-Original-Status`: absent, the default (201); a final status (200-599); else undefined (not trusted). */
export function originalStatus(header: string | null): number | undefined {
  if (header === null) return DEFAULT_ORIGINAL_STATUS;
  if (!/^\s*\d{3}\s*$/.test(header)) return undefined;
  const status = Number(header);
  return status >= 200 && status <= 599 ? status : undefined;
}

/** What became of an answer: applied to the claim asked about, or stale (something else settled it first). */
export type Applied = "applied" | "stale";

/**
 * Applies what the origin said to the claim whose fencing token it was sent (`fence`): found,
 * stored as the key's answer; absent, released (a queued job's claim, `job`, only unmarked as
 * sent); unknown, the key waits longer before the cron asks again. Counted and ledgered as
 * `reconciled` / `reconcile_failed`; a stale answer is only logged.
 */
export async function applyAnswer(
  ref: RecordRef,
  fence: string,
  says: OriginSays,
  settings: ReconcileSettings,
  job = "",
): Promise<Applied> {
  const args: Array<string | number> =
    says.kind === "found"
      ? answerArgs(says, settings.ttl)
      : says.kind === "unknown"
        ? [says.status ?? "", settings.reconcile_after]
        : [];
  const [result, state] = await runReconcile(ref, says.kind === "unknown" ? "failed" : says.kind, fence, job, args);
  if (result !== "ok") {
    log("reconcile_stale", { route: ref.route, key: ref.keyHash, state: String(state) });
    return "stale";
  }
  if (says.kind === "unknown") noteIdempotency(ref, "reconcile_failed", "reconcile_failed");
  else noteIdempotency(ref, "reconciled", "reconciled");
  return "applied";
}

async function runReconcile(
  ref: RecordRef,
  op: "found" | "absent" | "failed",
  fence: string,
  job: string,
  rest: Array<string | number>,
): Promise<unknown[]> {
  const keys = [
    idempotencyRecordKey(ref.prefix, ref.route, asKeyHash(ref.keyHash)),
    idempotencyIndeterminateKey(ref.prefix, ref.route),
    ledgerKey(ref.prefix),
  ];
  const maxlen = ref.trail?.ledgerLength ?? LEDGER_MAXLEN;
  const context = JSON.stringify({ trace: ref.trail?.trace ?? "" });
  const args = [op, ref.route, ref.keyHash, maxlen, fence, job, ...rest, context];
  return scriptReply(await ref.store.run(ref.store.script(reconcileLua), keys, args), "reconcile.lua");
}

/** What a duplicate's reconciliation needs: the record (in the settle store), the route's settings, the key by name, the origin. */
export interface DuplicateReconcile {
  ref: RecordRef;
  settings: ReconcileSettings;
  key: string;
  origin: URL | undefined;
}

/**
 * A duplicate that found its key indeterminate, on a route that reconciles: the origin is asked
 * before the duplicate is answered (within `reconcile_timeout`). Whatever settled the key (this
 * answer, or another meanwhile), the duplicate claims again and is answered as the key now says:
 * the stored answer replayed, or, the key released, run as a first arrival. Still unknown: the
 * indeterminate claim as it was (a 409).
 */
export async function reconcileDuplicate(
  c: Claim,
  ask: DuplicateReconcile,
  again: () => Promise<Claim>,
): Promise<Claim> {
  // never about a call that may still be running (a lapsed claim within its call's longest life)
  if (c.kind !== "indeterminate" || c.busy || ask.settings.reconcile === undefined) return c;
  const fence = String(c.fence);
  const { reconcile: template, reconcile_timeout: timeoutMs, max_body: maxBody } = ask.settings;
  const says = await askOrigin(
    { template, origin: ask.origin, key: ask.key, fence, trace: ask.ref.trail?.trace },
    { timeoutMs, maxBody },
  );
  if (says === undefined) return c;
  try {
    await applyAnswer(ask.ref, fence, says, ask.settings);
  } catch (e) {
    // the answer could not be written: the key is as it was (indeterminate), and so is the answer
    logError("reconcile_apply_failed", e, { route: ask.ref.route });
    return c;
  }
  return says.kind === "unknown" ? c : again();
}
