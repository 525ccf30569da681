import { describe, expect, it } from "vitest";
import { readCostBody } from "./response-cost.js";

/*
 * readCostBody: sluice's own copy of a body charged from the response (docs/algorithms.md, Cost from the
 * response) is read to its end, within its bounds in bytes and in time after the client's delivery.
 */

/** A body of `chunks` of `size` bytes, one every `everyMs`, that ends (or, `open`, stays open); `cancelled` once cancelled. */
function origin(chunks: number, size: number, everyMs = 0, open = false) {
  const state = { sent: 0, cancelled: false };
  const body = new ReadableStream<Uint8Array>({
    async pull(c) {
      if (state.sent >= chunks) {
        if (!open) c.close();
        else await new Promise(() => undefined);
        return;
      }
      if (everyMs > 0) await new Promise((r) => setTimeout(r, everyMs));
      state.sent += 1;
      c.enqueue(new Uint8Array(size));
    },
    cancel() {
      state.cancelled = true;
    },
  });
  return { body, state };
}

function counting() {
  const seen = { bytes: 0 };
  return { seen, costs: { push: (chunk: Uint8Array) => void (seen.bytes += chunk.byteLength) } };
}

describe("readCostBody", () => {
  it("reads a body to its end, however long its delivery goes on, and says it was whole", async () => {
    const { body } = origin(5, 100, 20);
    const { seen, costs } = counting();
    const never = new Promise<void>(() => undefined);
    expect(await readCostBody(body, costs, never, { maxBytes: 1000, msAfterDelivery: 10 })).toBe(true);
    expect(seen.bytes).toBe(500);
  });

  it("stops past the byte bound, cancels the rest and says it was not whole", async () => {
    const { body, state } = origin(100, 100);
    const { seen, costs } = counting();
    expect(await readCostBody(body, costs, Promise.resolve(), { maxBytes: 1000, msAfterDelivery: 60_000 })).toBe(false);
    expect(seen.bytes).toBeLessThanOrEqual(1000);
    expect(state.cancelled).toBe(true);
  });

  it("stops a body still open at the time bound after the client's delivery ended, cancels the rest and says it was not whole", async () => {
    const { body, state } = origin(1, 10, 0, true);
    const { costs } = counting();
    expect(await readCostBody(body, costs, Promise.resolve(), { maxBytes: 1000, msAfterDelivery: 50 })).toBe(false);
    expect(state.cancelled).toBe(true);
  });

  it("says a body that failed was not whole", async () => {
    const body = new ReadableStream<Uint8Array>({
      pull: (c) => c.error(new Error("origin reset")),
    });
    expect(await readCostBody(body, counting().costs, Promise.resolve())).toBe(false);
  });
});
