/*
 * W3C Trace Context (https://www.w3.org/TR/trace-context/#traceparent-header): the `traceparent`
 * a request carries, checked, or one made up for a request without a valid one, so that the log
 * lines, the ledger and the origin all name the request by the same trace.
 */
import { hex } from "./digest.js";

/** version "-" trace-id "-" parent-id "-" trace-flags, lowercase hex; a later version may add "-" fields. */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/**
 * The header's value when it is a valid `traceparent`, else `undefined`: version `ff` is invalid,
 * version `00` has exactly four fields, and an all-zero trace-id or parent-id is invalid.
 *
 * @example parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") // the same
 */
export function parseTraceparent(value: string | null | undefined): string | undefined {
  const v = value?.trim();
  const m = v ? TRACEPARENT.exec(v) : null;
  if (!m || !v) return undefined;
  const [, version, traceId, parentId, , rest] = m;
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId ?? "") || /^0+$/.test(parentId ?? "")) return undefined;
  return v;
}

/** A new `traceparent` (version 00, random ids, not sampled: sluice records, it does not sample). */
export function newTraceparent(): string {
  return `00-${randomHex(16)}-${randomHex(8)}-00`;
}

/** The request's `traceparent` when valid, else a new one. */
export function traceparentOf(headers: Headers): { traceparent: string; generated: boolean } {
  const given = parseTraceparent(headers.get("traceparent"));
  return given ? { traceparent: given, generated: false } : { traceparent: newTraceparent(), generated: true };
}

function randomHex(bytes: number): string {
  const b = crypto.getRandomValues(new Uint8Array(bytes));
  // an all-zero id is invalid: the chance is nil, but a made-up header must never be one
  if (b.every((x) => x === 0)) b[0] = 1;
  return hex(b);
}
