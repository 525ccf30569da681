import type { Bucket } from "./decide.js";
import type { OverrideCopies } from "./overrides.js";
import { figureReader, type FigureReader, type ResponseSource } from "./response-figures.js";
import { groupByStore, runDecide } from "./script-call.js";
import type { Decision } from "./types.js";

/*
 * Cost from the response (README): a limit with `cost = { response, reserve, max }` takes
 * `reserve` at admission, and once the response reports its figure the charge is settled to
 * min(figure, max) with decide.lua's "settle" mode, which may leave the bucket in debt. A header's
 * figure is known with the headers; a body's (`json:`, `sse:`) once the body has ended. A response
 * that never reports (no header, no field, not a whole number, a body past the cap) keeps the reserve.
 */

/** The figure a response header reports; undefined when it reports none. */
export function reportedCost(headers: Headers, header: string): number | undefined {
  const text = headers.get(header)?.trim();
  if (text === undefined || !/^\d{1,15}$/.test(text)) return undefined;
  return Number(text);
}

/** The buckets an admitted decision charged from the response (a refusal, or a refused bucket, charged nothing). */
export function chargedFromResponse(buckets: readonly Bucket[], d: Decision): Bucket[] {
  if (d.verdict === "reject") return [];
  return buckets.filter(
    (b) => b.limit.responseCost && d.outcomes.find((o) => o.key === b.key && o.limit === b.limit)?.allowed,
  );
}

/**
 * Each bucket with the delta to settle: its figure (`figureOf`, bounded by the limit's `max`) less
 * the reserve it took; those that report nothing, or exactly the reserve, are left out.
 */
export function settlements(charged: readonly Bucket[], figureOf: (b: Bucket) => number | undefined): Bucket[] {
  return charged.flatMap((b): Bucket[] => {
    const rc = b.limit.responseCost;
    const figure = rc && figureOf(b);
    const delta = !rc || figure === undefined ? 0 : Math.min(figure, rc.max) - (b.params?.cost ?? b.limit.cost);
    return delta === 0 ? [] : [{ ...b, delta }];
  });
}

/** The charges reported in the response's headers. */
export function headerSettlements(charged: readonly Bucket[], headers: Headers): Bucket[] {
  return settlements(charged, (b) => {
    const rc = b.limit.responseCost;
    return rc?.from === "header" ? reportedCost(headers, rc.header) : undefined;
  });
}

/**
 * The charges reported in the response's body: fed its chunks as they pass (one reader per
 * source, however many limits read it), asked for what is due once it has ended, been cut, or
 * failed: what the bytes seen report (the last event of a stream seen so far; nothing from a JSON
 * body cut short, which does not parse).
 */
export class BodyCosts {
  private constructor(
    private readonly charged: readonly Bucket[],
    private readonly readers: ReadonlyMap<string, FigureReader>,
  ) {}

  /** The body's charges, or undefined when no bucket reads the body. */
  static of(charged: readonly Bucket[], headers: Headers): BodyCosts | undefined {
    const readers = new Map<string, FigureReader>();
    const mine = charged.filter((b) => {
      const rc = b.limit.responseCost;
      const reader = rc && !readers.has(sourceId(rc)) ? figureReader(rc, headers) : undefined;
      if (rc && reader) readers.set(sourceId(rc), reader);
      return rc !== undefined && readers.has(sourceId(rc));
    });
    return mine.length === 0 ? undefined : new BodyCosts(mine, readers);
  }

  push(chunk: Uint8Array): void {
    for (const r of this.readers.values()) r.push(chunk);
  }

  /** What is due; call once, when the body is done. */
  due(): Bucket[] {
    const figures = new Map([...this.readers].map(([id, r]) => [id, r.figure()] as const));
    return settlements(this.charged, (b) =>
      b.limit.responseCost ? figures.get(sourceId(b.limit.responseCost)) : undefined,
    );
  }
}

const sourceId = (s: ResponseSource): string =>
  s.from === "header" ? `header:${s.header}` : `${s.from}:${s.path.join(".")}`;

/** Settles the charges in the Redis that holds each bucket: one "settle" call per Redis. */
export async function settle(buckets: readonly Bucket[], overrides: OverrideCopies): Promise<void> {
  if (buckets.length === 0) return;
  const now = Date.now();
  await Promise.all(groupByStore([...buckets]).map((g) => runDecide(g, "settle", (b) => overrides.input(b, now))));
}
