import type { MetricsBuffer } from "../../src/metrics/index.js";

/**
 * What a buffer writes to the all-time hash on a forced flush, as HGETALL would give it back: the
 * flush runs against a stand-in store whose pipeline records each `HINCRBY` of `…:total`.
 */
export async function flushedTotals(m: MetricsBuffer): Promise<Record<string, number>> {
  const total: Record<string, number> = {};
  const pipeline = new Proxy(
    {},
    {
      get: (_, op: string) =>
        op === "exec"
          ? async () => []
          : (key: string, field: string, n: number) => {
              if (op === "hincrby" && key.endsWith(":total")) total[field] = (total[field] ?? 0) + n;
            },
    },
  );
  const stores = {
    offPath: () => ({ pipeline: async (build: (batch: typeof pipeline) => void) => (build(pipeline), []) }),
  } as unknown as Parameters<MetricsBuffer["flush"]>[1];
  await m.flush({ key_prefix: "t" }, stores, () => undefined, true);
  return total;
}
