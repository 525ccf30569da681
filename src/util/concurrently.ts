/**
 * Runs `work` on every item, at most `limit` at once, in the items' order of starting. Resolves
 * when all are done; if any rejected, rejects with the first failure, but only once every item has
 * run (a caller's cleanup after it never races items still running).
 */
export async function forEachConcurrently<T>(
  items: readonly T[],
  limit: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const failures: unknown[] = [];
  const lane = async (): Promise<void> => {
    while (next < items.length) await work(items[next++] as T).catch((e: unknown) => void failures.push(e));
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  if (failures.length > 0) throw failures[0];
}
