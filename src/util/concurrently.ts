/**
 * Runs `work` on every item, at most `limit` at once, in the items' order of starting; resolves
 * when all are done. `work` must not reject (each caller handles its own failures).
 */
export async function forEachConcurrently<T>(
  items: readonly T[],
  limit: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) await work(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
}
