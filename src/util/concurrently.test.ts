import { describe, expect, it } from "vitest";
import { forEachConcurrently } from "./concurrently.js";

describe("forEachConcurrently", () => {
  it("runs every item once, never more than `limit` at once, starting them in order", async () => {
    const started: number[] = [];
    let running = 0;
    let most = 0;
    await forEachConcurrently([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 3, async (i) => {
      started.push(i);
      most = Math.max(most, ++running);
      await new Promise((done) => setTimeout(done, 5 + ((i * 7) % 4)));
      running--;
    });
    expect(started).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(most).toBe(3);
  });

  it("runs every item even when one fails, then rejects with the first failure", async () => {
    const done: number[] = [];
    const run = forEachConcurrently([0, 1, 2, 3, 4], 2, async (i) => {
      await new Promise((resolve) => setTimeout(resolve, 2));
      if (i === 1 || i === 3) throw new Error(`item ${i}`);
      done.push(i);
    });
    await expect(run).rejects.toThrow("item 1");
    expect(done.sort()).toEqual([0, 2, 4]);
  });

  it("does nothing for no items", async () => {
    let called = false;
    await forEachConcurrently([], 4, async () => {
      called = true;
    });
    expect(called).toBe(false);
  });
});
