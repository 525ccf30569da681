/*
 * A response body watched as it is delivered, without holding it back: the in-flight slots are
 * freed when it has been delivered (./in-flight.ts), and a cost from the response is read from it
 * as it passes (./response-figures.ts). One wrapper serves both, so a body is wrapped once.
 */

/** What watches a body. Neither call may alter what the client gets: a throw from either is ignored. */
export interface BodyObserver {
  /** Each chunk, before it is handed on (so a reader sees it before the client may take its buffer). */
  onChunk?(chunk: Uint8Array): void;
  /** Once: every byte has been handed on, the body erred, or the reader cancelled (a client that went away). */
  onEnd(): void;
}

/** The same bytes as `body`, pulled one chunk at a time as the client reads, shown to `observer` on the way. */
export function observeBody(body: ReadableStream<Uint8Array>, observer: BodyObserver): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    quietly(() => observer.onEnd());
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const chunk = await reader.read();
        if (chunk.done) {
          end();
          controller.close();
          return;
        }
        quietly(() => observer.onChunk?.(chunk.value));
        controller.enqueue(chunk.value);
      } catch (e) {
        end();
        controller.error(e);
      }
    },
    async cancel(reason) {
      end();
      await reader.cancel(reason);
    },
  });
}

/** Runs `f`, dropping what it throws: watching a body must never break its delivery. */
function quietly(f: () => void): void {
  try {
    f();
  } catch {
    // the watcher's own loss (a figure not read, say); the client's bytes are unaffected
  }
}
