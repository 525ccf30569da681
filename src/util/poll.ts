/**
 * Tries again with backoff while `busy` says so and `budgetMs` allows: pauses of `startMs`,
 * doubling up to `maxMs`. `again(last)` is told when a try is the last one the budget allows
 * (so a refusal can be recorded once, not on every poll).
 *
 * @example const c = await pollWhile(await claim(), (c) => c.kind === "inflight", () => claim(), { startMs: 50, maxMs: 500, budgetMs: 2000 });
 */
export async function pollWhile<T>(
  first: T,
  busy: (t: T) => boolean,
  again: (last: boolean) => Promise<T>,
  o: { startMs: number; maxMs: number; budgetMs: number },
): Promise<T> {
  let t = first;
  for (
    let pause = o.startMs, waited = 0;
    busy(t) && waited + pause <= o.budgetMs;
    waited += pause, pause = Math.min(pause * 2, o.maxMs)
  ) {
    await new Promise((r) => setTimeout(r, pause));
    t = await again(waited + pause + Math.min(pause * 2, o.maxMs) > o.budgetMs);
  }
  return t;
}

/**
 * Runs `work` until it resolves, pausing after each failure (`startMs`, doubling up to `maxMs`)
 * while the pauses fit in `budgetMs`; `failed` is told of each failure. Rejects with the last one.
 *
 * @example await retried(() => complete(ref, owner, ...), { startMs: 200, maxMs: 2000, budgetMs: 6000 }, log);
 */
export async function retried<T>(
  work: () => Promise<T>,
  o: { startMs: number; maxMs: number; budgetMs: number },
  failed: (e: unknown) => void,
): Promise<T> {
  for (let pause = o.startMs, waited = 0; ; waited += pause, pause = Math.min(pause * 2, o.maxMs)) {
    try {
      return await work();
    } catch (e) {
      failed(e);
      if (waited + pause > o.budgetMs) throw e;
    }
    await new Promise((r) => setTimeout(r, pause));
  }
}
