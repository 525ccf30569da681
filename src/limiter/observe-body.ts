/*
 * A response body watched as it is delivered, without holding it back: the in-flight slots are
 * freed when it has been delivered (./in-flight.ts), and a cost from the response is read from it
 * as it passes (./response-figures.ts). One wrapper serves both, so a body is wrapped once.
 */

/** How a body's delivery ended: every byte handed on, the origin's body erred, or the client went away. */
export type BodyEnd = "done" | "failed" | "cancelled";

/** What watches a body. No call may alter what the client gets: a throw from any is ignored. */
export interface BodyObserver {
  /** Each chunk, before it is handed on (so a reader sees it before the client may take its buffer). */
  onChunk?(chunk: Uint8Array): void;
  /** Once, when delivery is over, and how. */
  onEnd(end: BodyEnd): void;
  /**
   * When the client goes away: the rest of the origin's body, handed over instead of cancelled
   * (the observer then reads it, see readRest, or cancels it). Without it the body is cancelled.
   */
  onRest?(rest: ReadableStreamDefaultReader<Uint8Array>): void;
}

/** The same bytes as `body`, pulled one chunk at a time as the client reads, shown to `observer` on the way. */
export function observeBody(body: ReadableStream<Uint8Array>, observer: BodyObserver): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let ended = false;
  const end = (how: BodyEnd) => {
    if (ended) return;
    ended = true;
    quietly(() => observer.onEnd(how));
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const chunk = await reader.read();
        if (chunk.done) {
          end("done");
          controller.close();
          return;
        }
        quietly(() => observer.onChunk?.(chunk.value));
        controller.enqueue(chunk.value);
      } catch (e) {
        end("failed");
        controller.error(e);
      }
    },
    async cancel(reason) {
      const { onRest } = observer;
      if (onRest && !ended) {
        // handed over before the end is told, so that whoever waits for the end finds the rest read
        try {
          onRest.call(observer, reader);
          end("cancelled");
          return;
        } catch {
          // not taken: cancelled below, as without an onRest
        }
      }
      end("cancelled");
      await reader.cancel(reason);
    },
  });
}

/** The most of a body's rest readRest reads, in bytes and in time. */
export interface RestBounds {
  maxBytes: number;
  maxMs: number;
}

/** How reading the rest ended: the body's end, its error, or a bound reached first (the rest is then cancelled). */
export type RestEnd = "done" | "failed" | "bounded";

/**
 * Reads what is left of a body no client is reading any more, showing each chunk to `onChunk`,
 * until it ends, fails or passes `bounds` (more bytes than maxBytes, or longer than maxMs): then
 * the rest is cancelled, so the origin's connection is not held open.
 */
export async function readRest(
  rest: ReadableStreamDefaultReader<Uint8Array>,
  onChunk: (chunk: Uint8Array) => void,
  bounds: RestBounds,
): Promise<RestEnd> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"bounded">((resolve) => (timer = setTimeout(() => resolve("bounded"), bounds.maxMs)));
  let end: RestEnd = "failed";
  try {
    end = await readUntil(rest, onChunk, bounds.maxBytes, late);
    return end;
  } catch {
    return "failed";
  } finally {
    clearTimeout(timer);
    if (end === "bounded") cancelQuietly(rest);
  }
}

async function readUntil(
  rest: ReadableStreamDefaultReader<Uint8Array>,
  onChunk: (chunk: Uint8Array) => void,
  maxBytes: number,
  late: Promise<"bounded">,
): Promise<RestEnd> {
  let bytes = 0;
  for (;;) {
    const next = await Promise.race([rest.read(), late]);
    if (next === "bounded") return next;
    if (next.done) return "done";
    bytes += next.value.byteLength;
    if (bytes > maxBytes) return "bounded";
    quietly(() => onChunk(next.value));
  }
}

function cancelQuietly(rest: ReadableStreamDefaultReader<Uint8Array>): void {
  rest.cancel("no reader left").catch((e: unknown) =>
    console.error(JSON.stringify({ event: "body_rest_cancel_failed", message: String(e) })),
  );
}

/** Runs `f`, dropping what it throws: watching a body must never break its delivery. */
function quietly(f: () => void): void {
  try {
    f();
  } catch {
    // the watcher's own loss (a figure not read, say); the client's bytes are unaffected
  }
}
