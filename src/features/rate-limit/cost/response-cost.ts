import type { OverrideCopies } from "../decision/overrides.js";
import { figureReader, type FigureReader, type ResponseSource } from "./response-figures.js";
import { groupByStore, runDecide } from "../decision/script-call.js";
import type { Bucket, Decision } from "../types.js";
import { logError } from "../../../util/log.js";

/*
 * Cost from the response (docs/algorithms.md): a limit with `cost = { response, reserve, max }` takes
 * `reserve` at admission, and once the response reports its figure the charge is settled to
 * min(figure, max) with decide.lua's "settle" mode, which may leave the bucket in debt. A header's
 * figure is known with the headers; a body's (`json:`, `sse:`) once the body has ended, read from a
 * copy of it in waitUntil, however the client reads (within BODY_BOUNDS). A successful (2xx) response
 * whose figure can never be read (no header or field, not a whole number, a body past the cap, a
 * body that failed or passed the bounds) is charged `max`: never just the reserve, which a client
 * could otherwise choose by cutting the stream or asking for a large body. A refusal or failure
 * of the origin (not 2xx) that reports nothing keeps the reserve.
 */

/** How much of a body is read for its figure: past either bound it reports nothing (and pays `max`). */
export interface BodyBounds {
  /** The body's bytes: an LLM stream of tens of thousands of tokens is a few MiB. */
  maxBytes: number;
  /** How long the reading may go on once the client's delivery is over (waitUntil's work is cut 30 s after it). */
  msAfterDelivery: number;
}

export const BODY_BOUNDS: BodyBounds = { maxBytes: 8 << 20, msAfterDelivery: 20_000 };

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
 * the reserve it took; a bucket whose figure is unreadable pays `max` when `unreadablePaysMax`
 * (a 2xx response), else keeps its reserve. Those left with exactly the reserve are left out.
 */
export function settlements(
  charged: readonly Bucket[],
  figureOf: (b: Bucket) => number | undefined,
  unreadablePaysMax: boolean,
): Bucket[] {
  return charged.flatMap((b): Bucket[] => {
    const rc = b.limit.responseCost;
    if (!rc) return [];
    const figure = figureOf(b) ?? (unreadablePaysMax ? rc.max : undefined);
    const delta = figure === undefined ? 0 : Math.min(figure, rc.max) - (b.params?.cost ?? b.limit.cost);
    return delta === 0 ? [] : [{ ...b, delta }];
  });
}

/** Whether an origin's answer did the work it is charged for: a 2xx whose figure cannot be read pays `max`. */
export const paysMaxUnread = (status: number): boolean => status >= 200 && status < 300;

/** The charges reported in the response's headers (of the buckets that read a header). */
export function headerSettlements(charged: readonly Bucket[], res: Response): Bucket[] {
  const fromHeader = charged.filter((b) => b.limit.responseCost?.from === "header");
  return settlements(
    fromHeader,
    (b) => {
      const rc = b.limit.responseCost;
      return rc?.from === "header" ? reportedCost(res.headers, rc.header) : undefined;
    },
    paysMaxUnread(res.status),
  );
}

/**
 * The charges reported in the response's body: fed the chunks of sluice's own copy of it
 * (readCostBody; one reader per source, however many limits read it), asked for what is due once
 * that is over: what a whole body reports (a stream's last event);
 * `max` for a 2xx body that ended without it, or did not end (failed, cut past the bounds).
 */
export class BodyCosts {
  private constructor(
    private readonly charged: readonly Bucket[],
    private readonly readers: ReadonlyMap<string, FigureReader>,
    private readonly status: number,
  ) {}

  /** The body's charges, or undefined when no bucket reads the body. */
  static of(charged: readonly Bucket[], res: Response): BodyCosts | undefined {
    const readers = new Map<string, FigureReader>();
    const mine = charged.filter((b) => {
      const rc = b.limit.responseCost;
      const reader = rc && !readers.has(sourceId(rc)) ? figureReader(rc, res.headers) : undefined;
      if (rc && reader) readers.set(sourceId(rc), reader);
      return rc !== undefined && readers.has(sourceId(rc));
    });
    return mine.length === 0 ? undefined : new BodyCosts(mine, readers, res.status);
  }

  push(chunk: Uint8Array): void {
    for (const r of this.readers.values()) r.push(chunk);
  }

  /** What is due; call once, when the body is over: `whole` when it was read to its end. */
  due(whole: boolean): Bucket[] {
    const figures = new Map([...this.readers].map(([id, r]) => [id, whole ? r.figure() : undefined] as const));
    return settlements(
      this.charged,
      (b) => (b.limit.responseCost ? figures.get(sourceId(b.limit.responseCost)) : undefined),
      paysMaxUnread(this.status),
    );
  }
}

const sourceId = (s: ResponseSource): string =>
  s.from === "header" ? `header:${s.header}` : `${s.from}:${s.path.join(".")}`;

/** Settles the charges in the Redis that holds each bucket: one "settle" call per Redis. */
export async function settleResponseCosts(buckets: readonly Bucket[], overrides: OverrideCopies): Promise<void> {
  if (buckets.length === 0) return;
  const now = Date.now();
  await Promise.all(groupByStore([...buckets]).map((g) => runDecide(g, "settle", (b) => overrides.input(b, now))));
}

/**
 * Reads `body` (sluice's own copy of a response body) to its end, feeding `costs`, whatever the
 * client does with its copy: whether it was read whole (within `bounds`), else the rest is cancelled.
 * The time bound starts when `deliveryOver` settles: while the client is still being served, a
 * long stream goes on.
 */
export async function readCostBody(
  body: ReadableStream<Uint8Array>,
  costs: Pick<BodyCosts, "push">,
  deliveryOver: Promise<void>,
  bounds: BodyBounds = BODY_BOUNDS,
): Promise<boolean> {
  const reader = body.getReader();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let finished = false;
  const late = deliveryOver.then(
    () =>
      new Promise<"late">((resolve) => {
        if (!finished) timer = setTimeout(() => resolve("late"), bounds.msAfterDelivery);
      }),
  );
  // cut: a bound was reached first, the rest is cancelled (the client's copy goes on)
  let cut = false;
  try {
    cut = !(await readAll(reader, costs, bounds.maxBytes, late));
    return !cut;
  } catch {
    // the origin's body failed: a figure it never reached is unreadable
    return false;
  } finally {
    finished = true;
    clearTimeout(timer);
    if (cut) cancelQuietly(reader);
  }
}

async function readAll(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  costs: Pick<BodyCosts, "push">,
  maxBytes: number,
  late: Promise<"late">,
): Promise<boolean> {
  let bytes = 0;
  for (;;) {
    const next = await Promise.race([reader.read(), late]);
    if (next === "late") return false;
    if (next.done) return true;
    bytes += next.value.byteLength;
    if (bytes > maxBytes) return false;
    costs.push(next.value);
  }
}

function cancelQuietly(reader: ReadableStreamDefaultReader<Uint8Array>): void {
  reader.cancel("read no further").catch((e: unknown) => logError("response_cost_cancel_failed", e));
}
